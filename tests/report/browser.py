"""A small Chrome DevTools Protocol client: start Debian's headless ``chromium``, load a
page, collect what would land in its console, evaluate JavaScript, take a screenshot.

Strategy: chromium is started with ``--remote-debugging-port=0`` and its own profile
directory; it writes the port it picked to ``<profile>/DevToolsActivePort``.  The page
target's websocket URL comes from ``/json/list`` and one websocket (``websocket-client``)
carries every command.  Console errors are collected from three CDP sources, because
each misses something the others see: ``Runtime.consoleAPICalled`` (console.error /
console.assert), ``Runtime.exceptionThrown`` (uncaught exceptions, syntax errors in
inline scripts), ``Log.entryAdded`` (browser-side errors: failed loads, CSP, ...).
Every network request is recorded too (``Network.requestWillBeSent``) so a test can
assert that a page fetches nothing.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket  # websocket-client

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
START_TIMEOUT_S = 30
LOAD_TIMEOUT_S = 60


def find_chromium() -> str | None:
    env = os.environ.get("MSGCAP_CHROMIUM")
    if env:
        return env
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(self, binary: str, width: int = 1400, height: int = 1000) -> None:
        self.profile = tempfile.mkdtemp(prefix="msgcap-chromium-")
        args = [
            binary, "--headless=new", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
            "--disable-extensions", "--disable-background-networking", "--disable-sync",
            "--mute-audio", "--hide-scrollbars", f"--window-size={width},{height}",
            "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
            f"--user-data-dir={self.profile}", "about:blank",
        ]
        self.log = open(Path(self.profile) / "chromium.log", "w+b")  # noqa: SIM115
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.port = self._wait_port()
        self.ws = websocket.create_connection(self._page_ws(), timeout=LOAD_TIMEOUT_S,
                                              suppress_origin=True)
        self._id = 0
        self.events: list[dict[str, Any]] = []
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    # -- process / connection -------------------------------------------------------

    def _wait_port(self) -> int:
        path = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}: "
                                   f"{self.output()[-2000:]}")
            if path.exists():
                first = path.read_text().splitlines()[:1]
                if first and first[0].strip().isdigit():
                    return int(first[0])
            time.sleep(0.05)
        raise RuntimeError(f"chromium did not open its debugging port in {START_TIMEOUT_S} s: "
                           f"{self.output()[-2000:]}")

    def _page_ws(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list",
                                        timeout=5) as r:
                targets = json.load(r)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.05)
        raise RuntimeError("chromium has no page target")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- protocol -----------------------------------------------------------------

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        my_id = self._id
        self.ws.settimeout(LOAD_TIMEOUT_S)  # drain/wait_event leave shorter ones behind
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_event(self, method: str, timeout: float = LOAD_TIMEOUT_S) -> dict[str, Any]:
        for ev in self.events:
            if ev["method"] == method:
                return ev
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)
                if msg["method"] == method:
                    return msg
        raise TimeoutError(f"no {method} within {timeout} s")

    def drain(self, seconds: float) -> None:
        """Collect events for a while (late console errors, async rendering)."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.ws.settimeout(left)
            try:
                msg = json.loads(self.ws.recv())
            except websocket.WebSocketTimeoutException:
                return
            if "method" in msg:
                self.events.append(msg)

    # -- page helpers -------------------------------------------------------------

    def load(self, url: str) -> None:
        self.events = []
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")
        self.drain(1.0)

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                        awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"evaluate failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def console_errors(self) -> list[str]:
        out = []
        for ev in self.events:
            m, p = ev["method"], ev.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                args = [a.get("value", a.get("description", "")) for a in p.get("args", [])]
                out.append(f"console.{p['type']}: " + " ".join(str(a) for a in args))
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                desc = d.get("exception", {}).get("description") or d.get("text", "")
                out.append(f"exception: {desc} (line {d.get('lineNumber')})")
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                e = p["entry"]
                out.append(f"log {e.get('source')}: {e.get('text')} {e.get('url', '')}".strip())
        return out

    def requests(self) -> list[str]:
        return [ev["params"]["request"]["url"] for ev in self.events
                if ev["method"] == "Network.requestWillBeSent"]

    def screenshot(self, path: str | os.PathLike[str], full_page: bool = True) -> bytes:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        if full_page:
            metrics = self.call("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"],
                              "height": min(size["height"], 16000), "scale": 1}
        data = base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)
        return data
