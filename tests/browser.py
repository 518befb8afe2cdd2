"""Headless Chromium over the DevTools protocol on a pipe: opens report pages as a person's browser would.

A test helper, not shipped: the report's browser tests and scripts/bench_fleet.py (render time) use it. Standard
library only: the protocol runs over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-separated JSON), so no port, no websocket
client and no network. Console errors, uncaught exceptions, log errors and JavaScript dialogs (an escaped
``alert`` that did run) are recorded per page.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio")


class BrowserUnavailable(Exception):
    """No usable Chromium on this host; the message says why (tests skip with it)."""


def find_chromium() -> str | None:
    for name in (os.environ.get("CONVBENCH_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


class Browser:
    def __init__(self, binary: str | None = None, timeout: float = 30.0):
        self.binary = binary or find_chromium()
        if not self.binary:
            raise BrowserUnavailable("no chromium on PATH (scripts/host-chromium.sh installs Debian's chromium)")
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="convbench-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._evt_r, evt_w = os.pipe()

        def wire() -> None:  # runs in the child before exec: fd 3 = commands in, fd 4 = replies out
            os.dup2(cmd_r, 3)
            os.dup2(evt_w, 4)

        try:
            self.proc = subprocess.Popen(
                [self.binary, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-pipe", "about:blank"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(3, 4),
                preexec_fn=wire)
        except OSError as exc:
            shutil.rmtree(self.profile, ignore_errors=True)
            raise BrowserUnavailable(f"cannot start {self.binary}: {exc}") from None
        finally:
            os.close(cmd_r)
            os.close(evt_w)
        self._next = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._events: queue.Queue = queue.Queue()
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.version = self.call("Browser.getVersion")
        except Exception as exc:
            err = self.proc.stderr.read(2000).decode(errors="replace") if self.proc.poll() is not None else ""
            self.close()
            raise BrowserUnavailable(f"{self.binary} did not answer on the DevTools pipe: {exc} {err}") from None

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._evt_r, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cv:
                    self._cv.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._cv:
                        self._replies[msg["id"]] = msg
                        self._cv.notify_all()
                else:
                    self._events.put(msg)

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        msg: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        with self._cv:
            while ident not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(f"no reply to {method}")
                self._cv.wait(left)
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def events(self, timeout: float = 0.0):
        """Drain events received so far (waiting up to ``timeout`` for the first)."""
        out = []
        try:
            out.append(self._events.get(timeout=timeout) if timeout else self._events.get_nowait())
            while True:
                out.append(self._events.get_nowait())
        except queue.Empty:
            pass
        return out

    def open(self, url: str, *, width: int = 1440, height: int = 900, settle: float = 0.3) -> Page:
        """A new tab at ``url`` after its load event, and ``settle`` seconds more for late console messages and
        dialogs."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session, target)
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=session)
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=session)
        page.navigate(url, settle)
        return page

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.call("Browser.close")
                except Exception:
                    pass
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
        finally:
            for fd in (self._cmd_w, self._evt_r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            if self.proc.stderr:
                self.proc.stderr.close()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Page:
    def __init__(self, browser: Browser, session: str, target: str):
        self.browser, self.session, self.target = browser, session, target
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.load_seconds: float | None = None

    def _handle(self, ev: dict[str, Any]) -> str | None:
        if ev.get("sessionId") != self.session:
            return None
        method, p = ev.get("method"), ev.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                      for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            self.errors.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            e = p["entry"]
            self.errors.append(f"log: {e.get('text')} {e.get('url') or ''}".strip())
        elif method == "Page.javascriptDialogOpening":
            self.dialogs.append(f"{p.get('type')}: {p.get('message')}")
            self.browser.call("Page.handleJavaScriptDialog", {"accept": True}, session=self.session)
        return method

    def pump(self, until: str | None = None, timeout: float = 0.2) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            evs = self.browser.events(timeout=max(0.0, min(left, 0.1)) or 0.01)
            for ev in evs:
                if self._handle(ev) == until and until is not None:
                    return True
            if time.monotonic() >= deadline:
                return False

    def navigate(self, url: str, settle: float = 0.3) -> None:
        """Go to ``url`` in this tab; ``errors`` and ``dialogs`` then hold what that page raised, not earlier ones."""
        self.errors.clear()
        self.dialogs.clear()
        t0 = time.perf_counter()
        self.browser.call("Page.navigate", {"url": url}, session=self.session)
        if not self.pump("Page.loadEventFired", timeout=self.browser.timeout):
            raise TimeoutError(f"{url} did not finish loading")
        self.load_seconds = time.perf_counter() - t0
        self.pump(timeout=settle)  # late console messages and dialogs

    def visit(self, url: str, settle: float, again_over: float) -> float:
        """``navigate``, then once more where the load took ``again_over`` seconds or longer (the machine is shared:
        a second slow load is the page's); the better load in seconds. ``errors`` and ``dialogs`` hold both visits'."""
        self.navigate(url, settle)
        load = self.load_seconds
        if load >= again_over:
            errors, dialogs = list(self.errors), list(self.dialogs)
            self.navigate(url, settle)
            self.errors[:0], self.dialogs[:0] = errors, dialogs
            load = min(load, self.load_seconds)
        return load

    def evaluate(self, expression: str) -> Any:
        r = self.browser.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                   "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in r:
            raise RuntimeError(f"evaluate failed: {r['exceptionDetails'].get('text')}")
        self.pump(timeout=0.05)
        return r.get("result", {}).get("value")

    def close(self) -> None:
        """Close the page's tab: a browser that opens hundreds of pages keeps every tab's renderer alive otherwise
        (a site check left about 600 Chromium processes running beside the tests)."""
        self.browser.call("Target.closeTarget", {"targetId": self.target})

    def screenshot(self, path: str | Path, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        data = self.browser.call("Page.captureScreenshot", params, session=self.session)["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path
