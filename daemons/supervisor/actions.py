"""What the slot machines decide, carried out:

* DownloadCode: fetch the bundle from nimbus over HTTP on a background thread, check its
  sha256 against the assignment's digest, extract it atomically (``downloads``).
* BuildEnvironment: build the venv of the code's requirements file on a background thread
  (``environments``).
* LaunchWorker: start the worker's command-line main (``launcher``) in its own session and
  cgroup, as the user ``worker_user`` gives it, with its topology's credentials and status
  (``handover``), the assignment it is launched for, its venv and ``topology.environment``. Its output goes to
  ``workers/<id>/worker.out`` only until the worker opens its own rotating ``worker.log``.
* KillWorker: SIGTERM to the worker's process group, or SIGKILL to every process of the
  worker (``containment``) once the slot says so.
* CleanupWorker: keep the worker's log, remove its directory, cgroup and local record.
* ReportProblem: a verdict that ended a worker (memory, start timeout), or an environment
  that could not be built, goes to the topology's errors, where ``squall status`` and the web
  UI show it.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from squall.daemons.launch_assignment import LaunchAssignment, write_launch_assignment
from squall.daemons.state import ClusterStateError, ErrorInfo
from squall.daemons.state.records import WORKER_COMPONENT
from squall.daemons.supervisor import launcher, worker_files
from squall.daemons.supervisor import slot as _slot
from squall.daemons.supervisor.containment import Containment
from squall.daemons.supervisor.downloads import CodeDownloads
from squall.daemons.supervisor.environments import EnvBuildError, TopologyEnvironments
from squall.daemons.supervisor.feed import AssignmentFeed
from squall.daemons.supervisor.handover import Handovers, HandoverUnavailable, NoSecrets, TopologyHandover
from squall.daemons.supervisor.metrics import SupervisorMetrics
from squall.daemons.supervisor.worker_user import WorkerAccounts, WorkerIdentity, WorkerUserError
from squall.daemons.supervisor.workers import LocalWorkers
from squall.daemons.timers import Clock
from squall.daemons.warn_once import WarnOnce
from squall.state.stores import NAMESPACE_KEY, embedded_path, namespace


class WorkerActions:
    """Carries out one slot's actions (``perform``) on the supervisor's loop thread.
    ``worker_conf``: the effective config without the daemons' secrets, a copy for each worker."""

    def __init__(self, conf: Mapping[str, Any], supervisor_id: str, host: str, local: LocalWorkers,
                 code: CodeDownloads, envs: TopologyEnvironments, feed: AssignmentFeed, accounts: WorkerAccounts,
                 containment: Containment,
                 memory_max: int | None, worker_conf: bytes, state_dir: Path, metrics: SupervisorMetrics,
                 clock: Clock, logger: Any, warn_once: WarnOnce) -> None:
        self.conf = conf
        self.id = supervisor_id
        self.host = host
        self.local = local
        self.layout = local.layout
        self.code = code
        self.envs = envs
        self.feed = feed
        self.accounts = accounts
        self.containment = containment
        self.memory_max = memory_max
        self.worker_conf = worker_conf
        self._worker_conf_keys: dict[str, Any] = yaml.safe_load(worker_conf) or {}
        self.state_dir = state_dir
        self.metrics = metrics
        self.clock = clock
        self.log = logger
        self._warn_once = warn_once
        self.handovers = Handovers()

    @property
    def workers(self) -> Mapping[str, Any]:
        return self.local.records

    def perform(self, port: int, action: _slot.Action) -> None:
        if isinstance(action, _slot.DownloadCode):
            self.log.info("code requested", port=port, topology=action.topology_id, digest=action.digest,
                          url=self.code.url(action.topology_id))
            self.code.request(action.topology_id, action.digest)
        elif isinstance(action, _slot.BuildEnvironment):
            self.envs.request(action.topology_id, action.digest)
        elif isinstance(action, _slot.LaunchWorker):
            self._launch(action)
        elif isinstance(action, _slot.KillWorker):
            if action.worker_id is not None:
                self.local.signal(action.worker_id, action.force, port, action.reason)
        elif isinstance(action, _slot.CleanupWorker):
            self.local.cleanup(action.worker_id, action.reason)
            ended = action.worker_id
            self._warn_once.forget(lambda key: ended in key)  # its one-off warnings may be said again
            self.local.save(self.id)
        elif isinstance(action, _slot.ReportProblem):
            self._report(action)

    def worker_command(self, action: _slot.LaunchWorker) -> list[str]:
        return [*launcher.worker_prefix(self.conf), "start", action.topology_id, self.id, str(action.port),
                action.worker_id]

    def _launch(self, action: _slot.LaunchWorker) -> None:
        fields = dict(port=action.port, topology=action.topology_id, worker=action.worker_id)
        cmd = self.worker_command(action)
        handover = self._handover(action.topology_id, fields)
        if handover is None:
            return  # no record: relaunched (with back-off) once the secrets can be read
        try:
            topology_env = self.envs.launch_env(action.topology_id, action.code_digest, os.environ.get("PATH", ""))
            who = self._identity(action.topology_id, handover.name, handover.state_namespace)
            launch_file = self._write_launch_assignment(action, handover.active)
            child = launcher.launch(cmd, self.layout.worker_dir(action.worker_id), self.layout, action.worker_id,
                                    self._conf_for(handover), handover.credentials, launch_file, who,
                                    self.containment, self.memory_max, topology_env)
        except (OSError, launcher.LaunchError, WorkerUserError, EnvBuildError) as exc:
            self.log.error("worker launch failed", command=cmd, error=str(exc), **fields)
            return  # no record: the next step sees no process and relaunches (with back-off)
        rec = self.local.add(action.worker_id, action.port, action.topology_id, action.executors,
                             action.code_digest, child, who.uid if who else None)
        self.local.save(self.id)
        self.log.info("worker launched", pid=child.pid, reason=action.reason, executors=rec.executors,
                      uid=who.uid if who else os.getuid(), **fields)

    def _conf_for(self, handover: TopologyHandover) -> bytes:
        """The worker's config: the supervisor's without its secrets, and where the topology's
        state lives (nimbus's choice; the topology's own conf.json may not name it)."""
        if handover.state_namespace is None:
            return self.worker_conf
        return yaml.safe_dump({**self._worker_conf_keys, NAMESPACE_KEY: handover.state_namespace},
                              sort_keys=True).encode()

    def _identity(self, topology_id: str, name: str | None, state_namespace: str | None) -> WorkerIdentity | None:
        """Whom the topology's worker runs as, with its code and state dir given to it. The
        state dir goes by the namespace nimbus chose (the topology's own, or its owner's
        earlier one): another topology's state dir, and the user that owns it, stay theirs."""
        held = {r.topology_id: r.uid for r in self.workers.values() if r.uid is not None}
        state = self._state_dir(state_namespace) if state_namespace else None
        who = self.accounts.identity(topology_id, name or topology_id, held, worker_files.owners(
            self.state_dir, but=state) if self.accounts.switches else ())
        if who is not None:
            worker_files.share_code(self.code.root / topology_id, who.gid)
            if state is not None:
                worker_files.own_state_dir(state, who)
        return who

    def _state_dir(self, state_namespace: str) -> Path:
        """The directory of a topology's embedded state files on this host."""
        return embedded_path(self.state_dir, namespace(state_namespace, "x", 0)).parent

    def _handover(self, topology_id: str, fields: dict[str, Any]) -> TopologyHandover | None:
        """The topology's credentials and status for its worker (see handover)."""
        self.handovers.keep_only(self.feed.snapshot or {})
        try:
            handover = self.handovers.get(self.feed.state, topology_id)
        except NoSecrets as exc:
            self._warn_once(("secrets", topology_id), f"{exc}; worker not launched", **fields)
            return None
        except HandoverUnavailable as exc:
            self.log.error("worker not launched", error=str(exc), **fields)
            return None
        if handover.from_memory:
            self.log.warning("ZooKeeper unreachable; launching with the topology's secrets and "
                             "assignment read earlier", **fields)
        return handover

    def _write_launch_assignment(self, action: _slot.LaunchWorker, active: bool) -> Path:
        """The whole assignment this launch is for (the worker's fallback while ZooKeeper is
        away); an older file is removed when there is none to write."""
        path = self.layout.launch_assignment_file(action.worker_id)
        assignment = self.feed.whole_assignment(action.topology_id)
        try:
            if assignment is not None:
                return write_launch_assignment(path, LaunchAssignment(assignment, active))
        except ValueError as exc:  # larger than a ZooKeeper node: the worker will need ZooKeeper
            self.log.warning("assignment not handed to the worker", error=str(exc), worker=action.worker_id)
        path.unlink(missing_ok=True)
        return path

    def _report(self, action: _slot.ReportProblem) -> None:
        """A verdict that ended a worker, in its topology's errors (``squall status``, the UI)."""
        problem = action.problem
        event = "worker ended by the supervisor" if action.worker_id else "worker cannot be started"
        self.log.warning(event, kind=problem.kind, error=problem.text, port=action.port,
                         topology=action.topology_id, worker=action.worker_id)
        self.metrics.counts[f"ended:{problem.kind}"] += 1
        if not self.feed.state.connected:
            return  # said in the log; ZooKeeper's errors cannot take it now
        error = ErrorInfo(self.clock.time(), WORKER_COMPONENT, -1, self.host, action.port, problem.text)
        try:
            self.feed.state.report_error(action.topology_id, error)
        except (ClusterStateError, ValueError) as exc:
            self.log.warning("cannot report the worker's end", topology=action.topology_id, error=str(exc))
