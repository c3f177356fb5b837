#!/usr/bin/env bash
# README command 2: install everything the tests need — Debian packages included —
# then lint and run the whole suite.  Extra arguments go to pytest.
#
# System packages (installed only when missing, with apt-get as root or through sudo):
#   chromium  headless browser for tests/report (the HTML report is opened for real)
#   tshark    the reassembly oracle (tests compare `msgcap follow --raw` with it)
#   tcpdump   live recordings of real brokers and clients (tests/tls, tests/felix)
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v tshark >/dev/null 2>&1 || need+=(tshark)
command -v tcpdump >/dev/null 2>&1 || [ -x /usr/sbin/tcpdump ] || need+=(tcpdump)
if [ "${#need[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        as_root=()
    elif command -v sudo >/dev/null 2>&1; then
        as_root=(sudo)
    else
        echo "error: the tests need the Debian packages: ${need[*]}" >&2
        echo "fix: install them as root (apt-get install ${need[*]}) and run this again" >&2
        exit 2
    fi
    echo "installing Debian packages: ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    # tshark asks whether non-root users may capture; the answer does not matter here
    echo "wireshark-common wireshark-common/install-setuid boolean false" \
        | "${as_root[@]}" debconf-set-selections 2>/dev/null || true
    "${as_root[@]}" apt-get update -qq >/dev/null
    "${as_root[@]}" apt-get install -y -qq "${need[@]}" >/dev/null
fi

python3 -m pip install -q -e '.[test]'
python3 -m ruff check .
python3 -m mypy  # reassembly/ and dissectors/, strict ([tool.mypy] in pyproject.toml)
# bytecode for our packages once (~1 s of CPU): with PYTHONDONTWRITEBYTECODE set (as on this
# machine) every `python -m analyzer.cli` a test starts would otherwise compile them from
# source again (~0.25 s of CPU per process, ~40% of a small `msgcap dissect`)
python3 -m compileall -q analyzer dissectors reassembly tests samples >/dev/null
python3 -m pytest "$@"
