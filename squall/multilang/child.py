"""One child process of a shell component: start, non-blocking pipes, stderr capture, kill.

The executor thread writes stdin itself, never blocking longer than it asks to: writes go to
a buffer drained as the pipe takes them. A reader thread per child takes stdout as the
child writes it (up to ``STDOUT_HOLD_BYTES`` held; beyond that the child's pipe fills and
it waits) and calls ``wake`` at the first bytes after the executor last took everything,
so a child that asks for task ids or syncs is answered at once, as Storm's ShellBolt does
from its reader thread, not when the next tuple arrives or a poll comes round. The end of
stdout wakes it too. While the executor converses with its child (``converse``: a child
that waits for its task ids after every emit, as Storm's ``storm.py`` does), the reader
steps aside and the executor thread reads the pipe itself, looking at it (``poll``,
``spin``) or waiting on it (``converse``): each answer then costs at most
one wake-up (the kernel's, of the thread that waits in ``select``), not a reader thread's
wake-up, a lock and a condition's hand-over to a second thread, each of which waits for the
GIL and, on a busy machine, for a CPU. Another thread reads stderr into the worker log (a bounded number of
lines a second, the rest counted) and keeps a short tail for error reports.

A child runs on the worker process's CPUs, not on the one CPU its executor thread is pinned
to (``free_cpus``). The child never outlives the worker: it leads its own process group (a kill reaches what
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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from squall.errors import SquallError

READ_CHUNK = 1 << 16
STDERR_LINE_MAX = 4096      # longer stderr lines are cut
STDERR_TAIL_LINES = 20      # kept for the report when the child dies
_SETPRIV = shutil.which("setpriv")


GONE = "is gone"  # the one wording for a child that closed its pipes or exited, whichever is seen first
FORKED_AWAY = f"{GONE} (it exited; a process it started kept its pipes open)"
STDOUT_HOLD_BYTES = 4 << 20  # stdout the reader thread holds for the executor, at most
READER_POLL_SECS = 0.5  # how often a reader with nothing to read or no room looks at ``closed``
EXIT_CHECK_SECS = 0.1  # how often an idle link asks whether the child's own process still runs


class ChildGone(SquallError):
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


def free_cpus(pid: int) -> None:
    """Let child ``pid`` run on the worker process's CPUs. A process starts with the CPU
    affinity of the thread that started it, and a worker pins its executor threads to one
    CPU (worker.pin.cpu, squall.runtime.affinity): a child left on that CPU shares it with
    the thread that answers it, so each round trip of Storm's storm.py (which waits for the
    task ids of every emit) is two context switches on one core while the other core idles.
    Set right after the child starts, before it has started anything of its own."""
    try:
        os.sched_setaffinity(pid, os.sched_getaffinity(os.getpid()))  # the main thread's: unpinned
    except (AttributeError, OSError):
        pass  # not Linux, or the child already exited: nothing to free


def launch_command(command: Sequence[str]) -> list[str]:
    """``command`` run under setpriv's parent-death signal where setpriv exists."""
    if _SETPRIV is not None:
        return [_SETPRIV, "--pdeathsig", "KILL", "--", *command]
    return list(command)


class ChildProcess:
    """The process and its pipes; ``log`` is a structlog logger bound to the task."""

    def __init__(self, command: Sequence[str], cwd: str | None, env: Mapping[str, str], log: Any,
                 lines_per_sec: int, wake: Callable[[], None] | None = None) -> None:
        self.command = list(command)
        self._wake = wake
        self._held: deque[bytes] = deque()  # stdout the reader took, oldest first
        self._held_bytes = 0
        self._eof = False          # the reader saw the end of stdout (or could not read it)
        self._woken = False        # wake was called since the executor last emptied _held
        lock = self._lock = threading.Lock()  # taken bare where no one waits (a Condition's with costs more)
        self._room = threading.Condition(lock)  # the reader waits here for room in _held
        self._news = threading.Condition(lock)  # the executor waits here for output (wait_output)
        self._listening = False
        self._conversing = False   # the executor reads stdout itself (converse); the reader waits
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
        free_cpus(self.pid)
        self._in_fd = self.proc.stdin.fileno()    # type: ignore[union-attr]
        self._out_fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        os.set_blocking(self._in_fd, False)
        os.set_blocking(self._out_fd, False)  # two threads may find it readable; one takes it
        self._stdout_ready = select.poll()  # spin's look at stdout: a read of an empty pipe raises
        self._stdout_ready.register(self._out_fd, select.POLLIN)
        self.closed = False
        self._stdout = threading.Thread(target=self._read_stdout, name=f"shell-stdout-{self.pid}",
                                        daemon=True)
        self._stdout.start()
        self._stderr = threading.Thread(target=self._read_stderr, name=f"shell-stderr-{self.pid}",
                                        daemon=True)
        self._stderr.start()
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
        if not self._out:  # nothing queued before it (a task-id answer, mostly): straight to the pipe
            n = self._to_pipe(data)
            self._queued += n
            self._sent += n
            if n == len(data):
                return
            data = data[n:]
        self._out += data
        self._queued += len(data)
        self._ends.append(self._queued)
        self.flush()

    def flush(self) -> None:
        """Hand the pipe what it takes now; ChildGone when the child closed stdin."""
        out = self._out
        while out:
            n = self._to_pipe(out)
            if not n:
                break
            del out[:n]
            self._sent += n
        ends = self._ends
        while ends and ends[0] <= self._sent:
            ends.popleft()

    def _to_pipe(self, data: bytes | bytearray) -> int:
        """Bytes of ``data`` the pipe took now (0: it is full); ChildGone when the child
        closed stdin."""
        try:
            return os.write(self._in_fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.EBADF):
                raise ChildGone(GONE) from None
            raise

    # -- stdout ---------------------------------------------------------------------------
    def read(self, limit: int = READ_CHUNK) -> bytes:
        """What the reader thread took from stdout (b"" if nothing, at least one chunk even
        past ``limit``); ChildGone once it is all taken and stdout ended."""
        room = self._room
        with self._lock:
            held = self._held
            if not held:
                if self._eof:
                    raise ChildGone(GONE)
                self._woken = False
                return b""
            data = held.popleft()
            while held and len(data) + len(held[0]) <= limit:
                data += held.popleft()
            was_full = self._held_bytes >= STDOUT_HOLD_BYTES
            self._held_bytes -= len(data)
            if not held:
                self._woken = False
            if was_full:
                room.notify()
        return data

    @property
    def holding(self) -> bool:
        """Whether ``read`` has more to hand on: output the executor has not read, or the
        end of stdout (which the next ``read`` reports)."""
        return bool(self._held) or self._eof

    def _read_stdout(self) -> None:
        """The reader thread: stdout into ``_held`` while there is room, waking the executor."""
        fd, room = self._out_fd, self._room
        try:
            while not self.closed:
                with room:
                    while (self._held_bytes >= STDOUT_HOLD_BYTES or self._conversing) and not self.closed:
                        room.wait(READER_POLL_SECS)
                if self.closed:
                    break
                readable, _, _ = select.select([fd], [], [], READER_POLL_SECS)
                if not readable:
                    continue
                with room:
                    if self._conversing:
                        continue  # the executor reads it itself (converse)
                    try:
                        data = os.read(fd, READ_CHUNK)  # under the lock: the order of chunks is kept
                    except BlockingIOError:
                        continue  # taken by the executor before this thread got the lock
                    if not data:
                        break
                    self._held.append(data)
                    self._held_bytes += len(data)
                    wake, self._woken = not self._woken, True
                    if self._listening:  # the executor waits in wait_output: it reads now
                        self._news.notify()
                        wake = False
                if wake and self._wake is not None:
                    self._wake()
        except (OSError, ValueError):
            pass  # a closed or broken pipe is the end of stdout
        finally:
            with room:
                self._eof = True
                wake = not self._woken
                self._woken = True
                self._news.notify()
            if wake and self._wake is not None and not self.closed:
                self._wake()
            self._close(self.proc.stdout)

    def check_exit(self, now: float) -> None:
        """ChildGone when the child's own process has exited although its pipes are open (it
        forked and let the original exit: the docs call a child broken when it exits).
        Asked when stdout is empty, at most every ``EXIT_CHECK_SECS``."""
        if now < self._exit_checked + EXIT_CHECK_SECS:
            return
        self._exit_checked = now
        if self.proc.poll() is None or self._eof or self._held:
            return  # running, or read() ends the link once it hands on what came before
        try:
            readable, _, _ = select.select([self._out_fd], [], [], 0)
        except (OSError, ValueError):
            raise ChildGone(GONE) from None
        if not readable:  # no data and no end of file: another process holds the pipe open
            raise ChildGone(FORKED_AWAY)

    def converse(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the child's next output, reading stdout on this (the
        executor's) thread while the reader thread stands aside; True if there is some
        output (or the end of it). ``end_conversation`` gives the pipe back to the reader."""
        lock = self._lock
        with lock:
            if self._held or self._eof:
                return True
            self._conversing = True
        fd = self._out_fd
        try:
            readable, _, _ = select.select([fd], [], [], timeout)
        except (OSError, ValueError):
            readable = [fd]  # a closed pipe: the read below says so
        if not readable:
            return False
        with lock:
            if self._held or self._eof:  # the reader took it before it stood aside
                return True
            return self._take_now()

    def poll(self) -> bool:
        """Take what stdout holds now, on this (the executor's) thread, without waiting; the
        reader thread stands aside until ``end_conversation``. True if there is some output
        (or the end of it). A bolt polls between its executor thread's turns of the other
        executors, so their work goes on while the child thinks."""
        with self._lock:
            if self._held or self._eof:
                return True
            self._conversing = True
            return self._take_now()

    def ready(self) -> bool:
        """Whether stdout has output (or its end) to read now, without reading it."""
        return bool(self._held) or self._eof or bool(self._stdout_ready.poll(0))

    def spin(self, secs: float) -> bool:
        """``poll`` until the child writes, for at most ``secs`` (no sleep: a child that
        answers within microseconds is read without a wake-up of this thread). Each look
        releases the GIL in its read, so the process's other threads go on."""
        if secs <= 0:
            return False
        ends = time.monotonic() + secs
        ready = self._stdout_ready.poll
        while not self.poll():  # the reader stands aside now: only this thread reads stdout
            while not ready(0):  # readable, at its end or closed: poll says which
                if time.monotonic() >= ends:
                    return False
        return True

    def _take_now(self) -> bool:
        """Read what stdout has (never waiting) into ``_held``, under the lock as the reader
        thread reads, so chunks keep their order; False if it had nothing."""
        try:
            data = os.read(self._out_fd, READ_CHUNK)
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            data = b""
        if not data:
            self._eof = True
            return True
        self._held.append(data)
        self._held_bytes += len(data)
        return True

    def end_conversation(self) -> None:
        """The reader thread takes stdout again (after ``converse``)."""
        with self._lock:
            if self._conversing:
                self._conversing = False
                self._room.notify()

    def wait_output(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the reader thread to take output (or the end of it);
        True if there is some. The executor uses it to go on with a child in conversation."""
        with self._news:
            if not (self._held or self._eof):
                self._listening = True
                self._news.wait(timeout)
                self._listening = False
            return bool(self._held) or self._eof

    def wait_io(self, timeout: float) -> None:
        """Sleep until stdout has data, stdin takes pending bytes, or ``timeout`` passes."""
        if timeout <= 0 or self._held or self._eof:
            return
        writers = [self._in_fd] if self._out else []
        try:
            # The reader thread takes what the select sees: back here, _held has it (or
            # soon will: a short spin at most).
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
        self._close(self.proc.stdin)
        with self._room:
            self._room.notify()
        self._stdout.join(1.0)  # it closes stdout: no read of a number the system reused
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
