"""Headless Chromium driven over the DevTools protocol, for tests of the web UI.

``HeadlessChromium`` starts Debian's ``chromium`` with its own profile directory and a
DevTools port on 127.0.0.1, attaches to its page over a websocket (``websocket-client``)
and offers what tests need: open a URL, evaluate JavaScript, click an element with real
mouse events, wait for a condition, save a screenshot. ``stop()`` ends the browser by the
PID (and process group) it started.
"""
from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions", "--mute-audio",
         "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0"]


class BrowserError(RuntimeError):
    """The browser could not be started or answered with an error."""


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


class HeadlessChromium:
    def __init__(self, width: int = 1400, height: int = 1000, timeout: float = 30.0,
                 trust_spki: list[str] = ()) -> None:
        """``trust_spki``: base64 sha256 hashes of public keys whose certificates the browser
        accepts without a CA (a test cluster's nimbus; see ``ClusterCredentials.nimbus_spki``)."""
        self.width, self.height, self.timeout = width, height, timeout
        self.trust_spki = list(trust_spki)
        self.profile = Path(tempfile.mkdtemp(prefix="squall-chromium-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self._ws: Any = None
        self._ids = itertools.count(1)
        self.events: deque[dict[str, Any]] = deque(maxlen=5000)  # DevTools events seen, newest last

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> HeadlessChromium:
        import websocket  # test dependency (websocket-client)

        binary = find_chromium()
        if binary is None:
            raise BrowserError("chromium is not installed (apt-get install -y chromium)")
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={self.width},{self.height}",
             *([f"--ignore-certificate-errors-spki-list={','.join(self.trust_spki)}"] if self.trust_spki else []),
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(self.profile / "stderr.log", "wb"),
            start_new_session=True)
        port = self._devtools_port()
        targets = self._wait(lambda: [t for t in self._json(port, "/json/list") if t.get("type") == "page"],
                             "a page target")
        self._ws = websocket.create_connection(targets[0]["webSocketDebuggerUrl"], timeout=self.timeout,
                                               suppress_origin=True)
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                  deviceScaleFactor=1, mobile=False)
        return self

    def _devtools_port(self) -> int:
        path = self.profile / "DevToolsActivePort"

        def ready() -> int | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise BrowserError(f"chromium exited with {self.proc.returncode}: "
                                   f"{(self.profile / 'stderr.log').read_text(errors='replace')[-2000:]}")
            try:
                first = path.read_text().splitlines()[0]
            except (OSError, IndexError):
                return None
            return int(first) if first.isdigit() else None

        return self._wait(ready, "the DevTools port")

    @staticmethod
    def _json(port: int, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return json.loads(resp.read())

    def _wait(self, probe: Any, what: str, timeout: float | None = None) -> Any:
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            try:
                value = probe()
            except (OSError, ValueError):
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out waiting for {what}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self._ws is not None:
            try:
                self._ws.close()
            except OSError:
                pass
            self._ws = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
            try:  # renderer and helper processes of this browser (its own session)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc = None
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> HeadlessChromium:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- DevTools -------------------------------------------------------------------------
    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events arriving meanwhile go to ``events``)."""
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            reply = json.loads(self._ws.recv())
            if "method" in reply and "id" not in reply:
                self.events.append(reply)
                continue
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
        raise BrowserError(f"{method}: no answer within {self.timeout}s")

    def evaluate(self, expression: str, await_promise: bool = False) -> Any:
        """The JSON value of a JavaScript expression in the page; BrowserError if it throws."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=await_promise)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"JavaScript error: {text}")
        return result.get("result", {}).get("value")

    def open(self, url: str, ready: str = "document.readyState === 'complete'") -> None:
        self.call("Page.navigate", url=url)
        self.wait_for(ready, f"{url} to load")

    def wait_for(self, expression: str, what: str, timeout: float | None = None) -> None:
        """Wait until a JavaScript expression is truthy (in JavaScript's sense)."""
        self._wait(lambda: self.evaluate(f"Boolean({expression})"), what, timeout)

    def click(self, selector: str) -> None:
        """A real mouse click (pressed and released) in the middle of the element."""
        box = self.evaluate(f"""(() => {{
            const el = document.querySelector({json.dumps(selector)});
            if (!el) return null;
            el.scrollIntoView({{block: "center"}});
            const r = el.getBoundingClientRect();
            return {{x: r.left + r.width / 2, y: r.top + r.height / 2}};
        }})()""")
        if not box:
            raise BrowserError(f"no element matches {selector!r}")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box["x"], y=box["y"], button="left", clickCount=1)

    def type_text(self, selector: str, text: str) -> None:
        """Focus an input and type into it as a keyboard would."""
        self.click(selector)
        self.call("Input.insertText", text=text)

    def requests(self, url_part: str) -> list[dict[str, Any]]:
        """Requests the page sent whose URL contains ``url_part`` (needs ``Network.enable``)."""
        self.call("Runtime.evaluate", expression="0")  # drain events queued before now
        return [e["params"]["request"] for e in self.events
                if e.get("method") == "Network.requestWillBeSent" and url_part in e["params"]["request"]["url"]]

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page (beyond the window's height)."""
        metrics = self.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": max(self.width, size["width"]), "height": size["height"], "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
