"""dissectors.checksum: the crc32c package's function, loaded without its __init__."""

from __future__ import annotations

import subprocess
import sys

import crc32c as package
from hypothesis import given
from hypothesis import strategies as st

from dissectors import checksum


def test_the_compiled_module_is_loaded_on_its_own():
    assert checksum.loaded_directly
    assert checksum.crc32c(b"123456789") == checksum.CHECK_VALUE == 0xE3069283


@given(st.binary(max_size=4096), st.integers(0, 0xFFFFFFFF))
def test_it_is_the_package_function(data, start):
    assert checksum.crc32c(data) == package.crc32c(data)
    assert checksum.crc32c(data, start) == package.crc32c(data, start)  # (a running CRC)
    assert checksum.crc32c(memoryview(data)) == package.crc32c(data)


def test_loading_it_does_not_run_the_package():
    # the package's __init__ (importlib.metadata and all) is what it is there to avoid
    code = ("import sys; from dissectors import checksum; "
            "print(checksum.loaded_directly, 'crc32c' in sys.modules, "
            "'importlib.metadata' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "False", "False"]
