"""Runs a worker's hooks (squall.hooks) at its start and shutdown, within a time bound.

Each phase runs the hooks in declaration order on a thread of its own, and the worker waits
for it at most ``topology.worker.hook.start.timeout.secs`` (or ``...shutdown.timeout.secs``,
which must fit in the supervisor's kill grace). A hook that cannot be unpickled or
raises is reported (log and the error sink, under ``__system``) and the next one runs; a
phase still running at the deadline is reported, naming the hook it is stuck in, and left
behind (a daemon thread): a hook never ends or holds up a worker for longer than that.
"""
from __future__ import annotations

import pickle
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from squall.context import WorkerContext
from squall.hooks import WorkerHook
from squall.logs import error_text
from squall.system_component import SYSTEM_TASK
from squall.tuple import SYSTEM_COMPONENT

Report = Callable[[str, int, str], None]  # (component, task, text), the worker's error sink


class WorkerHooks:
    """One worker's hooks: ``start()`` before its executors, ``shutdown()`` after them."""

    def __init__(self, blobs: Sequence[bytes], context: WorkerContext, conf: Mapping[str, Any], log: Any,
                 report: Report) -> None:
        self.context, self.log, self._report = context, log, report
        self.timeouts = {phase: float(conf.get(f"topology.worker.hook.{phase}.timeout.secs", default))
                         for phase, default in (("start", 30.0), ("shutdown", 1.0))}
        self.hooks: list[WorkerHook] = []
        for i, blob in enumerate(blobs):
            try:
                hook = pickle.loads(blob)
            except Exception as exc:  # noqa: BLE001 - e.g. its class is missing from the code
                self.report(f"worker hook {i} cannot be loaded", exc)
                continue
            self.hooks.append(hook)
        self.stuck: list[str] = []  # "phase: hook" of every phase left behind
        self.started = False

    def start(self) -> None:
        self.started = True
        self._phase("start", lambda hook: hook.start(self.context.conf, self.context))

    def shutdown(self) -> None:
        """Every hook's shutdown (those whose start raised too), if the start phase ran."""
        if self.started:
            self.started = False
            self._phase("shutdown", lambda hook: hook.shutdown())

    def _phase(self, phase: str, call: Callable[[WorkerHook], None]) -> None:
        if not self.hooks:
            return
        current: list[str] = []

        def run() -> None:
            for hook in self.hooks:
                current[:] = [type(hook).__name__]
                try:
                    call(hook)
                except Exception as exc:  # noqa: BLE001 - reported; the worker goes on
                    self.report(f"worker hook {type(hook).__name__} raised in {phase}", exc)
            current.clear()

        thread = threading.Thread(target=run, name=f"worker-hooks-{phase}", daemon=True)
        thread.start()
        timeout = self.timeouts[phase]
        thread.join(timeout)
        if thread.is_alive():
            name = current[0] if current else "?"
            self.stuck.append(f"{phase}: {name}")
            self.report(f"worker hook {name} did not finish its {phase} within "
                        f"topology.worker.hook.{phase}.timeout.secs ({timeout:g} s); the worker goes on without it")

    def report(self, text: str, exc: BaseException | None = None) -> None:
        full = text if exc is None else f"{text}: {error_text(exc)}"
        self.log.error(text, error=None if exc is None else repr(exc))
        self._report(SYSTEM_COMPONENT, SYSTEM_TASK, full)
