"""Where a profile's time goes: py-spy's collapsed stacks by thread, path stage and function.

Input is ``py-spy record --format raw --threads --idle``: one line per distinct stack,
``thread (tid): name;frame;...;frame count``, a frame being ``function (file:line)``.
A sample is idle when its innermost frame is a function that only waits (a condition,
an event, a ZeroMQ poll) or sits on a blocking call (a wait, sleep, poll or lock acquire:
read from the source line), and busy otherwise (a thread waiting for a CPU or for the GIL
counts as busy). A busy sample belongs to
the stage of its innermost frame that a rule below names: the runtime's own functions
first, then the user's topology code; what no rule names is "other". The rules follow
the runtime's modules as they are today; a frame they no longer match lands in "other",
which the summary shows, so a refactor that moves code shows up rather than hiding.
"""
from __future__ import annotations

import linecache
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

IDLE = "idle waits"
USER = "user code (execute, next_tuple)"
OTHER = "other (timers, metrics, logging, stdlib)"

# (stage, file suffix, function names or prefixes; None = every function of the file).
# The first rule that matches a frame names its stage; order matters within a file.
RULES: list[tuple[str, str, tuple[str, ...] | None]] = [
    ("acker ledger", "runtime/acker.py", None),
    ("acker ledger", "runtime/collectors.py",
     ("BoltCollector.ack", "BoltCollector.fail", "Outbox.fold", "Outbox.fail", "Outbox.acker_of",
      "SpoutCollector._unused_root")),
    ("acker ledger", "runtime/spout_executor.py",
     ("SpoutExecutor._acks", "SpoutExecutor._expire", "SpoutExecutor._call")),
    ("acker ledger", "runtime/acker_executor.py", None),
    ("outbox and queues", "runtime/collectors.py", ("Outbox.",)),
    ("emit and routing", "runtime/collectors.py", None),
    ("tuple creation", "squall/tuple.py", None),
    ("fields-grouping hash", "squall/grouping.py", None),
    ("outbox and queues", "runtime/queues.py", None),
    ("outbox and queues", "runtime/delivery.py", None),
    ("outbox and queues", "runtime/worker_runtime.py",
     ("WorkerRuntime.overloaded", "WorkerRuntime.relieve", "WorkerRuntime._set_bp")),
    ("outbox and queues", "runtime/receiver.py", ("Receiver._wait_for_room",)),
    ("receive dispatch", "runtime/receiver.py", ("Receiver.receive",)),
    ("receive dispatch", "messaging/base.py", ("ServerConnection.handle_frame",)),
    ("receive dispatch", "messaging/zmq.py", ("ZmqServer.",)),
    ("receive dispatch", "messaging/local.py", ("LocalServer.",)),
    ("wire encode/decode", "runtime/serialization.py", None),
    ("wire encode/decode", "runtime/admission.py", None),
    ("wire encode/decode", "messaging/codec.py", None),
    ("wire encode/decode", "runtime/transfer.py", None),
    ("wire encode/decode", "messaging/zmq.py", None),
    ("wire encode/decode", "messaging/local.py", None),
    ("executor step loops", "runtime/executor.py", None),
    ("executor step loops", "runtime/bolt_executor.py", None),
    ("executor step loops", "runtime/spout_executor.py", None),
    ("executor step loops", "runtime/executor_thread.py", None),
    ("executor step loops", "runtime/histogram.py", None),
    ("Kafka connector", "kafka/bolt.py", None),
    ("Kafka connector", "kafka/spout.py", None),
    ("Kafka connector", "kafka/failures.py", None),
    ("Kafka connector", "kafka/commits.py", None),
    ("Kafka connector", "kafka/offsets.py", None),
    ("Kafka connector", "kafka/lookups.py", None),
]
# Stages inlined into one function (the collectors' emit builds tuples and folds acks in
# place): the innermost frame's source line decides, before the function rules.
LINE_RULES: list[tuple[str, str, re.Pattern]] = [
    ("tuple creation", "runtime/collectors.py", re.compile(r"_new\(|\btup\.\w+ = |\bTuple\(|anchored_tuple\(")),
    ("acker ledger", "runtime/collectors.py",
     re.compile(r"_rand\(|_pending\[|\.acks\[|ack_val|immediate_acks|\bids\[|\.roots\b")),
    ("fields-grouping hash", "runtime/collectors.py", re.compile(r"\.choose\(")),
    ("tuple creation", "runtime/bolt_executor.py", re.compile(r"\bTuple\(")),
    ("tuple creation", "runtime/acker_executor.py", re.compile(r"\bTuple\(")),
]
STAGES = ["tuple creation", "emit and routing", "fields-grouping hash", "outbox and queues", "acker ledger",
          "executor step loops", "wire encode/decode", "receive dispatch", "Kafka connector", USER, OTHER]
# Functions that only wait (whatever their source line says).
IDLE_FUNCTIONS = {"Condition.wait", "Event.wait", "Poller.poll", "Thread.join", "sleep", "select"}
_BLOCKING = re.compile(r"\b(sleep|wait|poll|select)\(|\.acquire\(|\.get\(timeout=")  # .get: a queue's blocking get
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^():]+)(?::(?P<line>\d+))?\)$")


@dataclass(frozen=True)
class Frame:
    func: str
    file: str
    line: int


@dataclass
class Sample:
    thread: str
    frames: list[Frame]  # outermost first
    count: int


def parse(lines: Iterable[str]) -> list[Sample]:
    """py-spy's raw format (with ``--threads``); malformed lines are skipped."""
    out = []
    for raw in lines:
        raw = raw.rstrip("\n")
        stack, _, count = raw.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        parts = stack.split(";")
        head = parts[0]
        thread = head.split(": ", 1)[1] if head.startswith("thread (") and ": " in head else head
        frames = []
        for p in parts[1:]:
            m = _FRAME.match(p)
            if m:
                frames.append(Frame(m["func"], m["file"], int(m["line"] or 0)))
        out.append(Sample(thread, frames, int(count)))
    return out


def source_line(frame: Frame, roots: Sequence[Path]) -> str:
    """The frame's source line, looked up under ``roots`` (py-spy shortens paths)."""
    path = Path(frame.file)
    for candidate in ([path] if path.is_absolute() else [r / path for r in roots]):
        text = linecache.getline(str(candidate), frame.line)
        if text:
            return text
    return ""


def is_idle(sample: Sample, line_of: Callable[[Frame], str]) -> bool:
    if not sample.frames:
        return True
    leaf = sample.frames[-1]
    if leaf.func in IDLE_FUNCTIONS or leaf.func.rsplit(".", 1)[-1] in IDLE_FUNCTIONS:
        return True
    return bool(_BLOCKING.search(line_of(leaf)))


def stage_of(frames: Sequence[Frame], user_files: Iterable[str], line_of: Callable[[Frame], str]) -> str:
    """The stage of a busy sample: a line rule on its innermost frame, else its innermost
    frame that a function rule or the user's files name."""
    users = tuple(user_files)
    if frames:
        leaf = frames[-1]
        for stage, suffix, pattern in LINE_RULES:
            if leaf.file.endswith(suffix) and pattern.search(line_of(leaf)):
                return stage
    for f in reversed(frames):
        for stage, suffix, funcs in RULES:
            if f.file.endswith(suffix) and (funcs is None or any(
                    f.func == n or (n.endswith(".") and f.func.startswith(n)) for n in funcs)):
                return stage
        if Path(f.file).name in users:
            return USER
    return OTHER


@dataclass
class Profile:
    threads: dict[str, Counter] = field(default_factory=dict)  # thread -> Counter(busy=, idle=)
    stages: Counter = field(default_factory=Counter)           # busy samples by stage
    functions: Counter = field(default_factory=Counter)        # busy samples by innermost function
    lines: Counter = field(default_factory=Counter)            # busy samples by innermost frame (line)
    busy: int = 0


def summarize(samples: Iterable[Sample], user_files: Iterable[str], line_of: Callable[[Frame], str],
              skip_threads: Iterable[str] = ()) -> Profile:
    prof = Profile()
    skip = set(skip_threads)
    for s in samples:
        if s.thread in skip:
            continue
        idle = is_idle(s, line_of)
        prof.threads.setdefault(s.thread, Counter())["idle" if idle else "busy"] += s.count
        if idle:
            continue
        prof.busy += s.count
        prof.stages[stage_of(s.frames, user_files, line_of)] += s.count
        leaf = s.frames[-1]
        prof.functions[f"{leaf.func} ({leaf.file})"] += s.count
        prof.lines[leaf] += s.count
    return prof


def render(prof: Profile, top: int, line_of: Callable[[Frame], str]) -> str:
    lines = ["threads: share of their sampled time busy and waiting"]
    for name, c in sorted(prof.threads.items(), key=lambda kv: -kv[1]["busy"]):
        total = c["busy"] + c["idle"]
        lines.append(f"  {name:24} busy {100 * c['busy'] / total:5.1f}%   idle waits {100 * c['idle'] / total:5.1f}%"
                     f"   ({total} samples)")
    busy = max(prof.busy, 1)
    lines += ["", "busy samples by path stage"]
    for stage in STAGES:
        if prof.stages[stage]:
            lines.append(f"  {stage:42} {100 * prof.stages[stage] / busy:5.1f}%")
    executors = [c for name, c in prof.threads.items() if name.startswith("executors")]
    total = sum(c["busy"] + c["idle"] for c in executors)
    if total:
        idle = 100 * sum(c["idle"] for c in executors) / total
        lines.append(f"  {IDLE + ' (of the executor threads' + chr(39) + ' time)':42} {idle:5.1f}%")
    lines += ["", f"top {top} functions by self time (% of busy samples)"]
    for func, n in prof.functions.most_common(top):
        lines.append(f"  {100 * n / busy:5.1f}%  {func}")
    lines += ["", f"top {top} lines by self time (% of busy samples)"]
    for f, n in prof.lines.most_common(top):
        where = f"{f.func} ({Path(f.file).name}:{f.line})"
        lines.append(f"  {100 * n / busy:5.1f}%  {where:52} {line_of(f).strip()[:70]}")
    return "\n".join(lines)
