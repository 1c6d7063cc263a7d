"""A terminal for the acceptance tests: the installed app runs in a pseudo-terminal, as in a person's shell,
and its screen is read back through a terminal emulator (pyte), so a test types keys and reads what a
person would see."""

from __future__ import annotations

import os
import pty
import select
import signal
import struct
import subprocess
import termios
import threading
import time
from fcntl import ioctl
from pathlib import Path

import pyte


class Terminal:
    def __init__(self, argv: list[str], *, cwd: Path, env: dict[str, str], columns: int = 120, lines: int = 40):
        self.screen = pyte.Screen(columns, lines)
        self._stream = pyte.ByteStream(self.screen)
        self._lock = threading.Lock()
        master, slave = pty.openpty()
        ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                                     start_new_session=True, close_fds=True)
        os.close(slave)
        self._master = master
        self._done = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._done.is_set():
            ready, _, _ = select.select([self._master], [], [], 0.1)
            if not ready:
                continue
            try:
                data = os.read(self._master, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self._stream.feed(data)

    def text(self) -> str:
        with self._lock:
            return "\n".join(line.rstrip() for line in self.screen.display)

    def send(self, keys: str, pause: float = 0.3) -> None:
        os.write(self._master, keys.encode())
        time.sleep(pause)

    def wait_for(self, predicate, timeout: float, what: str) -> str:
        """Wait until predicate(screen text) holds; the screen when it does, else AssertionError with it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if predicate(text):
                return text
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; the screen:\n{self.text()}")

    def close(self) -> int | None:
        """End the app and everything it started (its process group), as closing the terminal would."""
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGHUP, 5), (signal.SIGKILL, 5)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._done.set()
        self._reader.join(2)
        os.close(self._master)
        return self.proc.returncode
