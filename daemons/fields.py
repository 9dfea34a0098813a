"""Field checks of the records squall reads from outside a process (ZooKeeper nodes,
supervisors' reports, files a supervisor hands its workers): each raises ValueError naming
the field, so that a malformed record is refused with a reason, never half-read. Executors
travel as task ranges, and in worker beats as runs of equal-width neighbours."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_TASK_ID = 2**31 - 1  # task ids are 32-bit, as in Storm
MAX_EXECUTOR_TASKS = 100_000  # one executor's task range; a wider one is refused, never iterated
MAX_BEAT_EXECUTORS = 100_000  # executors one worker beat may name
SYSTEM_TASK = -1  # Storm's system executor [-1, -1] may appear in worker beats

ExecutorId = tuple[int, int]


def field_value(d: Mapping[str, Any], key: str) -> Any:
    if key not in d:
        raise ValueError(f"missing field {key!r}")
    return d[key]


def as_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return value


def as_num(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number, got {value!r}")
    return float(value)


def as_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {value!r}")
    return value


def as_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list, got {type(value).__name__}")
    return value


def as_dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object, got {type(value).__name__}")
    return value


def as_bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be true or false, got {value!r}")
    return value


def int_field(d: Mapping[str, Any], key: str) -> int:
    return as_int(field_value(d, key), key)


def num_field(d: Mapping[str, Any], key: str) -> float:
    return as_num(field_value(d, key), key)


def str_field(d: Mapping[str, Any], key: str) -> str:
    return as_str(field_value(d, key), key)


def executor_id(start: Any, end: Any, what: str) -> ExecutorId:
    start, end = as_int(start, f"{what} start"), as_int(end, f"{what} end")
    if start > end:
        raise ValueError(f"{what} [{start}, {end}] has start after end")
    if start < SYSTEM_TASK or end > MAX_TASK_ID:
        raise ValueError(f"{what} [{start}, {end}] names task ids outside {SYSTEM_TASK}..{MAX_TASK_ID}")
    if end - start >= MAX_EXECUTOR_TASKS:
        raise ValueError(f"{what} [{start}, {end}] spans more than {MAX_EXECUTOR_TASKS} tasks")
    return (start, end)


def row_of(value: Any, width: int, what: str) -> list[Any]:
    if not isinstance(value, list) or len(value) != width:
        raise ValueError(f"{what} entry must be a list of {width}, got {value!r}")
    return value


def executor_runs(executors: list[ExecutorId]) -> list[list[int]]:
    """Executors as runs ``[first start, width, count]`` of equal-width neighbours: a
    worker beat stays a few bytes per component whatever the executor count."""
    runs: list[list[int]] = []
    for start, end in sorted(executors):
        width = end - start + 1
        if runs and runs[-1][1] == width and runs[-1][0] + width * runs[-1][2] == start:
            runs[-1][2] += 1
        else:
            runs.append([start, width, 1])
    return runs


def expand_runs(rows: list[Any], limit: int = MAX_BEAT_EXECUTORS) -> list[ExecutorId]:
    """The executors of ``executor_runs`` rows, refusing more than ``limit`` of them. A run
    is checked once, as a whole (what ``executor_id`` checks of each of its executors)."""
    out: list[ExecutorId] = []
    for row in rows:
        start, width, count = (as_int(v, "executor run") for v in row_of(row, 3, "executor_runs"))
        if width < 1 or count < 1 or len(out) + count > limit:
            raise ValueError(f"executor run {row!r} is empty or has more than {limit} executors")
        if start < SYSTEM_TASK or start + width * count - 1 > MAX_TASK_ID or width > MAX_EXECUTOR_TASKS:
            raise ValueError(f"executor run {row!r} names task ids outside {SYSTEM_TASK}..{MAX_TASK_ID} "
                             f"or executors wider than {MAX_EXECUTOR_TASKS} tasks")
        out.extend((start + i * width, start + (i + 1) * width - 1) for i in range(count))
    return out
