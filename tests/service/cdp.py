"""A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe``.

Chromium reads commands from file descriptor 3 and writes answers and events to 4, each a
JSON message ended by a NUL byte (the transport Puppeteer's "pipe" mode uses). No websocket
library is needed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import subprocess
import time
from typing import Any

CHROMIUM = "/usr/bin/chromium"


def _high(fd: int) -> int:
    new = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return new


class Browser:
    def __init__(self, user_data_dir: str, *, binary: str = CHROMIUM) -> None:
        cmd_r, self._cmd_w = os.pipe()  # we write commands, chromium reads fd 3
        self._evt_r, evt_w = os.pipe()  # chromium writes fd 4, we read
        # Move the child's ends above 9 so that the redirections below cannot clobber them.
        cmd_r, evt_w = _high(cmd_r), _high(evt_w)
        args = [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-extensions",
            "--no-first-run",
            "--remote-debugging-pipe",
            f"--user-data-dir={user_data_dir}",
            "about:blank",
        ]
        # Put the two pipe ends on fds 3 and 4 in the child (bash does the dup2; dash cannot name fds above 9).
        script = f'exec "$0" "$@" 3<&{cmd_r} 4>&{evt_w} {cmd_r}<&- {evt_w}>&-'
        self.proc = subprocess.Popen(
            ["bash", "-c", script, *args],
            pass_fds=(cmd_r, evt_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(cmd_r)
        os.close(evt_w)
        self._buf = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self.session: str | None = None

    # transport -------------------------------------------------------------------------
    def _read_message(self, timeout_s: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._evt_r], [], [], left)
            if not ready:
                return None
            chunk = os.read(self._evt_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(
        self,
        method: str,
        params: dict | None = None,
        *,
        session: bool = True,
        timeout_s: float = 30.0,
    ) -> dict:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read_message(max(0.0, deadline - time.monotonic()))
            if reply is None:
                raise TimeoutError(f"no answer to {method}")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self._events.append(reply)

    def wait_event(self, method: str, timeout_s: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            for i, ev in enumerate(self._events):
                if ev.get("method") == method:
                    return self._events.pop(i)
            msg = self._read_message(max(0.0, deadline - time.monotonic()))
            if msg is None:
                raise TimeoutError(f"no {method} event")
            if "method" in msg:
                self._events.append(msg)

    # page helpers ----------------------------------------------------------------------
    def open_page(self) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.send(
            "Target.attachToTarget",
            {"targetId": target["targetId"], "flatten": True},
            session=False,
        )
        self.session = attached["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")

    def navigate(self, url: str) -> None:
        self._events.clear()
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def submit(self, expression: str) -> None:
        """Run ``expression`` that submits a form, and wait for the next page to load."""
        self._events.clear()
        self.evaluate(expression)
        self.wait_event("Page.loadEventFired")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.send("Browser.close", session=False, timeout_s=5)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        os.close(self._cmd_w)
        os.close(self._evt_r)
