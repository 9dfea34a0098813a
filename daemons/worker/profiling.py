"""Profiles of this worker process, as an operator asks for them (``squall profile``; the UI's
jstack and heap dump, for Python): a stack dump of every thread, a sampling profile over some
seconds, a heap snapshot.

py-spy is used when it is installed (the ``profile`` extra): it samples from outside the
interpreter, so it costs the worker no GIL time and sees threads stuck in C code. When it is
missing or cannot attach to the process (no ptrace rights), the standard library does the job
from inside: ``sys._current_frames`` for stacks and for the sampler (a thread taking every
thread's stack ``RATE_HZ`` times a second), ``tracemalloc`` and ``gc`` for the heap. Every
result is text of at most ``MAX_RESULT_CHARS`` characters, and every profile ends within its
time (py-spy is killed past it).

A sampling profile is written as collapsed stacks (``frame;frame;frame count`` per line,
root first), what flame graph tools read (``flamegraph.pl``, speedscope, inferno).
"""
from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
import tracemalloc
from collections import Counter
from collections.abc import Callable
from types import FrameType

from squall.daemons.timers import sleep

RATE_HZ = 100
MAX_RESULT_CHARS = 1 << 20
MAX_STACKS = 5000  # distinct stacks a sampling profile keeps (the rest counted as "(other)")
MAX_DEPTH = 128
TOP_LINES = 40  # heap: allocation sites shown
TOP_TYPES = 40  # heap: object types shown
PY_SPY_GRACE_SECS = 20.0  # past its duration, py-spy is killed


def _frame_name(frame: FrameType) -> str:
    code = frame.f_code
    return f"{code.co_name} ({os.path.basename(code.co_filename)}:{frame.f_lineno})"


def _stack(frame: FrameType | None) -> list[str]:
    """Frame names, root first."""
    out: list[str] = []
    while frame is not None and len(out) < MAX_DEPTH:
        out.append(_frame_name(frame))
        frame = frame.f_back
    out.reverse()
    return out


def stack_dump() -> str:
    """Every thread's stack, as a traceback reads (innermost call last)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    lines = [f"stacks of pid {os.getpid()} at {time.strftime('%Y-%m-%d %H:%M:%S')} "
             f"({len(names)} threads; from sys._current_frames)"]
    for ident, frame in sorted(sys._current_frames().items()):
        lines.append("")
        lines.append(f"thread {names.get(ident, '?')} ({ident}):")
        lines.extend(line.rstrip("\n") for line in traceback.format_stack(frame, limit=MAX_DEPTH))
    return _bounded("\n".join(lines) + "\n")


def sample_stacks(secs: float, rate_hz: int = RATE_HZ, stop: Callable[[], bool] = lambda: False) -> str:
    """A sampling profile of every other thread over ``secs`` seconds, as collapsed stacks
    (most frequent first); each line starts with the thread's name. Real time
    (``perf_counter``): a measurement, not a decision on the worker's clock."""
    me = threading.get_ident()
    counts: Counter[str] = Counter()
    other = 0
    samples = 0
    period = 1.0 / rate_hz
    end = time.perf_counter() + secs
    while time.perf_counter() < end and not stop():
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            key = ";".join([names.get(ident, str(ident)), *_stack(frame)])
            if key in counts or len(counts) < MAX_STACKS:
                counts[key] += 1
            else:
                other += 1
        samples += 1
        sleep(period)
    head = (f"# sampling profile of pid {os.getpid()}: {samples} samples over {secs:g}s at {rate_hz} Hz "
            f"(from sys._current_frames); collapsed stacks, root first\n")
    body = "".join(f"{stack} {n}\n" for stack, n in counts.most_common())
    if other:
        body += f"(other) {other}\n"
    return _bounded(head + body)


def heap_snapshot(secs: float, stop: Callable[[], bool] = lambda: False) -> str:
    """Live objects by type (``gc``) and, from ``tracemalloc`` traced over ``secs`` seconds,
    the lines that allocated the most memory still held."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start(16)
    try:
        end = time.perf_counter() + secs
        while time.perf_counter() < end and not stop():
            sleep(min(0.2, max(0.0, end - time.perf_counter())))
        snapshot = tracemalloc.take_snapshot()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        if started:
            tracemalloc.stop()
    lines = [f"heap of pid {os.getpid()} at {time.strftime('%Y-%m-%d %H:%M:%S')}",
             "", f"allocations traced over {secs:g}s (tracemalloc): {current:,} bytes held, peak {peak:,}",
             f"top {TOP_LINES} lines by bytes still held:"]
    for stat in snapshot.statistics("lineno")[:TOP_LINES]:
        frame = stat.traceback[0]
        lines.append(f"  {stat.size:>12,} B {stat.count:>9,} blocks  {frame.filename}:{frame.lineno}")
    types: Counter[str] = Counter(type(o).__name__ for o in gc.get_objects())
    lines += ["", f"live objects tracked by gc: {sum(types.values()):,}; top {TOP_TYPES} types:"]
    lines += [f"  {n:>12,}  {name}" for name, n in types.most_common(TOP_TYPES)]
    return _bounded("\n".join(lines) + "\n")


def py_spy() -> str | None:
    """The py-spy executable next to this interpreter or on PATH, or None."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def py_spy_profile(exe: str, kind: str, secs: float, out: str) -> str:
    """Run py-spy on this process: ``dump`` for a stack, ``record`` (raw: collapsed stacks)
    for a sampling profile; its output, or RuntimeError saying why it failed."""
    pid = str(os.getpid())
    if kind == "stack":
        args = [exe, "dump", "--pid", pid]
    else:
        args = [exe, "record", "--pid", pid, "--duration", str(max(1, round(secs))), "--rate", str(RATE_HZ),
                "--format", "raw", "--threads", "--output", out, "--nonblocking"]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=secs + PY_SPY_GRACE_SECS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"py-spy did not run: {exc}") from None
    if done.returncode != 0:
        raise RuntimeError(f"py-spy exited {done.returncode}: {(done.stderr or done.stdout).strip()[-500:]}")
    if kind == "stack":
        return _bounded(f"# py-spy dump of pid {pid}\n{done.stdout}")
    try:
        with open(out, encoding="utf-8", errors="replace") as f:
            text = f.read(MAX_RESULT_CHARS)
    except OSError as exc:
        raise RuntimeError(f"py-spy wrote no profile: {exc}") from None
    finally:
        try:
            os.unlink(out)
        except OSError:
            pass
    return _bounded(f"# py-spy record of pid {pid}: {secs:g}s at {RATE_HZ} Hz; collapsed stacks\n{text}")


def profile(kind: str, secs: float, scratch: str, stop: Callable[[], bool] = lambda: False,
            use_py_spy: bool = True) -> str:
    """The result of one profile of this process (``kind``: stack, record or heap)."""
    exe = py_spy() if use_py_spy and kind in ("stack", "record") else None
    note = ""
    if exe is not None:
        try:
            return py_spy_profile(exe, kind, secs, scratch)
        except RuntimeError as exc:
            note = f"# py-spy failed ({exc}); the standard library's profile follows\n"
    if kind == "stack":
        return note + stack_dump()
    if kind == "record":
        return note + sample_stacks(secs, stop=stop)
    if kind == "heap":
        return heap_snapshot(secs, stop=stop)
    raise ValueError(f"unknown profile kind {kind!r}")


def _bounded(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[:MAX_RESULT_CHARS] + f"\n... [cut at {MAX_RESULT_CHARS} characters]\n"
