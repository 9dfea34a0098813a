"""One child process of a shell component: start, non-blocking pipes, stderr capture, kill.

The executor thread does all stdin/stdout I/O itself, never blocking longer than it asks
to: writes go to a buffer drained as the pipe takes them, reads take what is there. A
thread reads stderr into the worker log (a bounded number of lines a second, the rest
counted) and keeps a short tail for error reports.

The child never outlives the worker: it leads its own process group (a kill reaches what
it started), and on Linux ``setpriv --pdeathsig KILL`` makes the kernel kill it when the
thread that started it (an executor thread of the worker) dies, SIGKILL included.
"""
from __future__ import annotations

import errno
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

READ_CHUNK = 1 << 16
STDERR_LINE_MAX = 4096      # longer stderr lines are cut
STDERR_TAIL_LINES = 20      # kept for the report when the child dies
_SETPRIV = shutil.which("setpriv")


GONE = "is gone"  # the one wording for a child that closed its pipes or exited, whichever is seen first
FORKED_AWAY = f"{GONE} (it exited; a process it started kept its pipes open)"
EXIT_CHECK_SECS = 0.1  # how often an idle link asks whether the child's own process still runs


class ChildGone(Exception):
    """The child closed its pipes or exited (the text is ``GONE``, or ``FORKED_AWAY``)."""


class LineBudget:
    """At most ``per_sec`` lines a second; the rest are counted (plain code)."""

    def __init__(self, per_sec: int) -> None:
        self.per_sec = per_sec
        self.window = -1.0
        self.used = 0
        self.dropped = 0

    def allow(self, now: float) -> bool:
        if now - self.window >= 1.0:
            self.window, self.used = now, 0
        self.used += 1
        if self.used <= self.per_sec:
            return True
        self.dropped += 1
        return False

    def take_dropped(self) -> int:
        n, self.dropped = self.dropped, 0
        return n


def launch_command(command: Sequence[str]) -> list[str]:
    """``command`` run under setpriv's parent-death signal where setpriv exists."""
    if _SETPRIV is not None:
        return [_SETPRIV, "--pdeathsig", "KILL", "--", *command]
    return list(command)


class ChildProcess:
    """The process and its pipes; ``log`` is a structlog logger bound to the task."""

    def __init__(self, command: Sequence[str], cwd: str | None, env: Mapping[str, str], log: Any,
                 lines_per_sec: int) -> None:
        self.command = list(command)
        self.log = log
        self._out = bytearray()        # written to stdin as the pipe takes it
        self._queued = 0               # bytes ever queued for stdin
        self._sent = 0                 # bytes the pipe took
        self._ends: deque[int] = deque()  # where each queued message ends (in _queued terms)
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._budget = LineBudget(lines_per_sec)
        program = self.command[0]
        if "/" in program:
            found = os.path.exists(os.path.join(cwd or os.getcwd(), program))
        else:
            found = shutil.which(program, path=env.get("PATH")) is not None
        if not found:
            raise FileNotFoundError(f"no program {program!r} (cwd {cwd}, PATH {env.get('PATH')})")
        self.proc = subprocess.Popen(launch_command(self.command), cwd=cwd, env=dict(env),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, bufsize=0, close_fds=True,
                                     start_new_session=True)
        self.pid = self.proc.pid
        self._in_fd = self.proc.stdin.fileno()    # type: ignore[union-attr]
        self._out_fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        os.set_blocking(self._in_fd, False)
        os.set_blocking(self._out_fd, False)
        self._stderr = threading.Thread(target=self._read_stderr, name=f"shell-stderr-{self.pid}",
                                        daemon=True)
        self._stderr.start()
        self.closed = False
        self._exit_checked = float("-inf")

    # -- stdin ----------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Bytes written but not yet taken by the pipe."""
        return len(self._out)

    @property
    def pending_messages(self) -> int:
        """Messages not yet wholly taken by the pipe."""
        return len(self._ends)

    def write(self, data: bytes) -> None:
        """Queue one message for stdin and send what the pipe takes now."""
        self._out += data
        self._queued += len(data)
        self._ends.append(self._queued)
        self.flush()

    def flush(self) -> None:
        """Hand the pipe what it takes now; ChildGone when the child closed stdin."""
        out = self._out
        while out:
            try:
                n = os.write(self._in_fd, out)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EBADF):
                    raise ChildGone(GONE) from None
                raise
            del out[:n]
            self._sent += n
        ends = self._ends
        while ends and ends[0] <= self._sent:
            ends.popleft()

    # -- stdout ---------------------------------------------------------------------------
    def read(self, limit: int = READ_CHUNK) -> bytes:
        """What stdout holds now (b"" if nothing); ChildGone at end of file."""
        try:
            data = os.read(self._out_fd, limit)
        except BlockingIOError:
            return b""
        except OSError as exc:
            if exc.errno == errno.EBADF:
                raise ChildGone(GONE) from None
            raise
        if not data:
            raise ChildGone(GONE)
        return data

    def check_exit(self, now: float) -> None:
        """ChildGone when the child's own process has exited although its pipes are open (it
        forked and let the original exit: the docs call a child broken when it exits).
        Asked when stdout is empty, at most every ``EXIT_CHECK_SECS``."""
        if now < self._exit_checked + EXIT_CHECK_SECS:
            return
        self._exit_checked = now
        if self.proc.poll() is None:
            return
        try:
            readable, _, _ = select.select([self._out_fd], [], [], 0)
        except (OSError, ValueError):
            raise ChildGone(GONE) from None
        if not readable:  # no data and no end of file: another process holds the pipe open
            raise ChildGone(FORKED_AWAY)

    def wait_io(self, timeout: float) -> None:
        """Sleep until stdout has data, stdin takes pending bytes, or ``timeout`` passes."""
        if timeout <= 0:
            return
        writers = [self._in_fd] if self._out else []
        try:
            select.select([self._out_fd], writers, [], timeout)
        except (OSError, ValueError):
            time.sleep(min(timeout, 0.01))

    # -- stderr ---------------------------------------------------------------------------
    def _read_stderr(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        partial = b""
        while True:
            try:
                data = stream.read(READ_CHUNK)
            except (OSError, ValueError):
                break
            if not data:
                break
            lines = (partial + data).split(b"\n")
            partial = lines.pop()[:STDERR_LINE_MAX]
            for raw in lines:
                self._stderr_line(raw[:STDERR_LINE_MAX])
        if partial:
            self._stderr_line(partial)
        dropped = self._budget.take_dropped()
        if dropped:
            self.log.warning("shell child stderr lines dropped", pid=self.pid, dropped=dropped)

    def _stderr_line(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        self.stderr_tail.append(line[:500])
        now = time.monotonic()
        if self._budget.allow(now):
            dropped = self._budget.take_dropped()
            self.log.info("shell child stderr", pid=self.pid, line=line,
                          **({"dropped_before": dropped} if dropped else {}))

    def tail(self) -> str:
        return "\n".join(self.stderr_tail)

    # -- end ------------------------------------------------------------------------------
    def exit_code(self) -> int | None:
        return self.proc.poll()

    def kill(self, grace: float = 0.0) -> int | None:
        """End the child and everything in its process group; its exit code.

        With ``grace``, stdin is closed first (well-behaved clients exit on end of file)."""
        if self.closed:
            return self.proc.returncode
        self.closed = True
        if grace > 0 and self.proc.poll() is None:
            self._close(self.proc.stdin)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.pid, signal.SIGKILL)  # its own group: the child's pid is the group id
        except (ProcessLookupError, PermissionError):
            pass
        try:
            code = self.proc.wait(5.0)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not take this long
            code = None
        for stream in (self.proc.stdin, self.proc.stdout):
            self._close(stream)
        self._stderr.join(1.0)
        self._close(self.proc.stderr)
        return code

    @staticmethod
    def _close(stream: Any) -> None:
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
