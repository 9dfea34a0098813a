"""What a worker does with its topology's operator requests (``/operations/<topology id>``,
:mod:`squall.daemons.state.operator_requests`), read through a ZooKeeper watch as the topology's
status is: log levels for a while, sampling of its components' emits into ``events.log``, a
profile of this worker into ``profile-<id>.txt`` (both served by the supervisor's logviewer,
through nimbus), and a restart when ``squall kill-workers`` asked for one.

``tick`` runs on the worker's ``operator`` timer (every second) and never raises: a request it
cannot carry out is logged, and the worker goes on. The watch only hands the newest requests
over and triggers the timer.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from squall.daemons import local_state
from squall.daemons.state.operator_requests import MAX_PROFILES, OperatorRequests, ProfileRequest
from squall.daemons.timers import Clock
from squall.daemons.worker import profiling
from squall.daemons.worker.log_levels import LogLevels
from squall.rotating_log import RotatingLogFile

EVENTS_MAX_BYTES = 1 << 20  # events.log rotates past this, keeping one older file
EVENTS_BACKUPS = 1
START_SLACK_SECS = 5.0  # a profile asked this long before the worker started still runs here
PROFILE_GRACE_SECS = 30.0  # a profile thread still running this long past its time is given up


class OperatorHandler:
    """One worker's side of the operator requests. ``runtime`` gives the WorkerRuntime (None
    before it exists); ``restart(reason)`` ends the worker so that its supervisor starts it again."""

    def __init__(self, layout: local_state.LocalLayout, worker_id: str, node: str, port: int, started_at: float,
                 clock: Clock, runtime: Callable[[], Any], restart: Callable[[str], None], logger: Any,
                 stopping: Callable[[], bool]) -> None:
        self.layout = layout
        self.worker_id, self.node, self.port = worker_id, node, port
        self.started_at = started_at
        self.clock = clock
        self._runtime = runtime
        self._restart = restart
        self._stopping = stopping
        self.log = logger
        self.levels = LogLevels()
        self._requests: OperatorRequests | None = None
        self._lock = threading.Lock()
        self._restarts_seen: int | None = None  # the restart count at this worker's first read
        self._done: set[str] = set()  # profiles taken (or given up) here
        self._profiling: tuple[str, threading.Thread, float] | None = None  # (id, thread, give-up time)
        self._events: RotatingLogFile | None = None
        self._sampling: dict[str, float] = {}
        self.failures = 0

    def on_requests(self, requests: OperatorRequests | None) -> None:
        """The watch's callback (kazoo's thread): keep the newest requests."""
        with self._lock:
            self._requests = requests or OperatorRequests()
            if self._restarts_seen is None:
                self._restarts_seen = self._requests.restarts

    def tick(self) -> None:
        """Carry out what the requests ask now; never raises."""
        with self._lock:
            requests = self._requests
        if requests is None or self._stopping():
            return
        now = self.clock.time()
        for step in (self._restart_if_asked, self._log_levels, self._sample, self._profile):
            try:
                step(requests, now)
            except Exception as exc:  # noqa: BLE001 - an operator request never ends the worker
                self.failures += 1
                self.log.warning("operator request failed", step=step.__name__.strip("_"), error=repr(exc))

    def _restart_if_asked(self, requests: OperatorRequests, now: float) -> None:
        if self._restarts_seen is not None and requests.restarts > self._restarts_seen:
            self._restarts_seen = requests.restarts
            self.log.info("restarting: kill-workers asked for it", restarts=requests.restarts)
            self._restart("kill-workers asked every worker of the topology to restart")

    def _log_levels(self, requests: OperatorRequests, now: float) -> None:
        for logger, level in self.levels.apply(requests.log_levels, now):
            self.log.info("log level set" if level != "reset" else "log level put back", logger=logger,
                          level=level)

    def _sample(self, requests: OperatorRequests, now: float) -> None:
        rt = self._runtime()
        if rt is None:
            return
        components = {ex.component for ex in rt.executors}
        wanted = {c: p for c in components if (p := requests.sampling(c, now)) > 0}
        if wanted != self._sampling:
            rt.set_sampling(lambda component: wanted.get(component, 0.0))
            self.log.info("sampling emits" if wanted else "sampling stopped", percent=wanted)
            self._sampling = wanted
        samples = rt.sampler.drain()
        if samples:
            if self._events is None:
                self._events = RotatingLogFile(self.layout.events_log(self.worker_id), EVENTS_MAX_BYTES,
                                               EVENTS_BACKUPS)
            self._events.write("".join(json.dumps(s, separators=(",", ":")) + "\n" for s in samples))

    def _profile(self, requests: OperatorRequests, now: float) -> None:
        running = self._profiling
        if running is not None:
            ident, thread, give_up = running
            if thread.is_alive() and now < give_up:
                return
            if thread.is_alive():
                self.log.warning("profile did not finish in time; given up", profile=ident)
            self._profiling = None
        for request in requests.profiles:
            if (request.node, request.port) != (self.node, self.port) or request.id in self._done:
                continue
            self._done.add(request.id)
            if request.at < self.started_at - START_SLACK_SECS:
                continue  # asked of the worker this one replaced
            thread = threading.Thread(target=self._take_profile, args=(request,), name=f"profile-{request.id}",
                                      daemon=True)
            self._profiling = (request.id, thread, now + request.secs + PROFILE_GRACE_SECS)
            self.log.info("profiling", profile=request.id, kind=request.kind, secs=request.secs)
            thread.start()
            return  # one at a time: the next waits for a later tick

    def _take_profile(self, request: ProfileRequest) -> None:
        path = self.layout.profile_file(self.worker_id, request.id)
        try:
            text = profiling.profile(request.kind, request.secs, str(path.with_suffix(".raw")),
                                     stop=self._stopping)
        except Exception as exc:  # noqa: BLE001 - the result says what went wrong
            text = f"# the profile failed: {exc!r}\n"
        try:
            local_state.write_atomic(path, text.encode("utf-8"), sync=False)
            self._keep_last(path.parent)
        except OSError as exc:
            self.log.warning("cannot write the profile", profile=request.id, error=str(exc))
            return
        self.log.info("profile written", profile=request.id, kind=request.kind, chars=len(text))

    @staticmethod
    def _keep_last(folder: Any) -> None:
        files = sorted(folder.glob("profile-*.txt"), key=lambda p: p.stat().st_mtime)
        for old in files[:-MAX_PROFILES]:
            old.unlink(missing_ok=True)

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None
