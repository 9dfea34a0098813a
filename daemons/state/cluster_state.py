"""ClusterState: the facade through which daemons read and write ZooKeeper (kazoo).

Storm's IStormClusterState in Python: typed reads, writes and watches of the records in
``records``, with the watchers of ``watchers`` and the elections of ``election`` running
through the small interfaces this class gives them (``WatchSupport``, ``ElectionSupport``).

The machinery underneath is ``session.ZkSession`` (the kazoo session, retries, the restore
thread) and ``nodes.ZkNodes`` (paths, ACLs, decoding, ephemerals, watches).

Layout under ``zookeeper.root`` (default ``/squall``); every node holds JSON ``{"v": 1, ...}``:

    /topologies/<id>                         TopologyInfo: metadata and status (no code)
    /assignments/<id>                        Assignment (what workers read: every slot)
    /node-assignments/<node>/<id>            NodeAssignment: one supervisor's part (daemons only)
    /supervisors/<id>                        SupervisorInfo (ephemeral), written when it changes
    /errors/<topology>/<component>           {"errors": [ErrorInfo, ...]}, oldest first, bounded
    /nimbus/leader/<lock node>               kazoo Lock contenders, data {"id": identifier}
    /credentials/<topology>                  TopologySecrets (daemons only)
    /operations/<topology>                   OperatorRequests: log levels, sampling, profiles,
                                             restarts asked of its workers (they read it)
    /tokens                                  PublishedTokens: the API token hashes (daemons only)
    /state-lineage/<name>                    StateLineage: each owner's state namespace for a name (daemons only)
    /layout                                  {"layout": 2} once assignments have node parts
    /workerbeats/<topology>/<node>-<port>    WorkerBeat of workers of the previous layout only

Nothing here is written per interval per worker: worker beats and executor stats travel
worker -> supervisor -> nimbus (``squall.daemons.reports``). ``/workerbeats`` is read only
for workers started by an earlier squall during a rolling upgrade
(docs/operations/upgrades.md).

Every node is created with the ACL ``acls.node_acl`` gives for its path; the client
authenticates as ``auth`` (the daemons' credential from the conf, or a worker's topology
credential). A refusal by ZooKeeper (NoAuth) raises ClusterStateError naming the path.

Reading malformed data (not JSON, another format version, wrong shape) logs a warning naming
the path, counts it in ``malformed_reads`` and yields None / skips the entry; it never raises.
ZooKeeper unreachable past the retry deadline (the session timeout) raises ClusterStateError.

Watches are re-synchronised after a reconnect or a session expiry, on this class's restore
thread. Ephemeral nodes written here are re-created after a session expiry. Everything here
is for timers and watches; never call it per tuple.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import structlog
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.lock import Lock
from kazoo.retry import ForceRetryError

from squall.daemons.fields import as_dict, as_list, field_value
from squall.daemons.state.acls import Credential, ZkAuth, topology_user
from squall.daemons.state.assignments import AssignmentNodes
from squall.daemons.state.election import NimbusElection, contender_order
from squall.daemons.state.operator_requests import OperatorRequests
from squall.daemons.state.records import (
    MAX_ERROR_CHARS,
    TOPOLOGY_STATUSES,
    ErrorInfo,
    NimbusId,
    PublishedTokens,
    Slot,
    StateLineage,
    SupervisorInfo,
    TopologyInfo,
    TopologySecrets,
    WorkerBeat,
    check_name,
    encode,
    slot_name,
)
from squall.daemons.state.session import ClusterStateError
from squall.daemons.state.watchers import Watch

__all__ = ["ClusterState", "ClusterStateError"]

log = structlog.get_logger("squall.state")


class ClusterState(AssignmentNodes):
    """Typed access to squall's ZooKeeper state for nimbus, supervisors and workers."""

    def __init__(self, conf: Mapping[str, Any], auth: ZkAuth | None = None, warn_outside_open: bool = True) -> None:
        """``auth``: a worker's topology credential; daemons leave it None and authenticate
        with ``zookeeper.auth.user`` / ``zookeeper.auth.password`` or ``$SQUALL_ZOOKEEPER_PASSWORD``
        (``ZkAuth.from_conf``; no user: no ACLs). ``warn_outside_open=False``: for the
        commands that lock those nodes, which would otherwise announce them open first."""
        super().__init__(conf, auth)
        self.warn_outside_open = warn_outside_open
        self._topology_digests: dict[str, str] = {}  # topology id -> digest identity
        self.errors_kept = int(self.conf["topology.errors.kept"])

    def _ensure_base_paths(self) -> None:
        client = self.client
        for part in ("topologies", "assignments", "node-assignments", "supervisors", "workerbeats",
                     "errors", "nimbus", "credentials", "state-lineage", "operations"):
            self._retry(client.ensure_path, self._path(part), self._acl(self._path(part)))
        self._base_paths_wanted = False
        if self.auth.enabled and self.auth.topology_id is None:
            self._warn_if_open(client)
            if self.warn_outside_open:
                self._warn_if_outside_open()

    # -- what elections use (ElectionSupport) -----------------------------------------
    def leader_lock(self, identifier: str) -> Lock:
        path = self._path("nimbus", "leader")
        return self.client.Lock(path, encode(path, {"id": identifier}).decode("utf-8"))

    def owns_node(self, path: str) -> bool:
        client = self.client
        try:
            stat = self._op("exists", path)
            client_id = client.client_id
        except (KazooException, KazooTimeoutError):
            return False
        return stat is not None and client_id is not None and stat.ephemeralOwner == client_id[0]

    def forget_election(self, election: NimbusElection) -> None:
        if election in self._elections:
            self._elections.remove(election)

    # -- topologies -------------------------------------------------------------------
    def set_topology(self, info: TopologyInfo) -> None:
        path = self._path("topologies", check_name(info.id, "topology id"))
        self._write(path, info.to_dict())

    def topology(self, topology_id: str) -> TopologyInfo | None:
        return self._read(self._path("topologies", topology_id), TopologyInfo.from_dict)

    def topology_ids(self) -> list[str]:
        return self._children(self._path("topologies"))

    def topologies(self) -> dict[str, TopologyInfo]:
        """Every well-formed topology node by id."""
        return {tid: info for tid, info in self.topology_entries().items() if info is not None}

    def topology_entries(self) -> dict[str, TopologyInfo | None]:
        """Every topology node by id; None for one whose data is malformed (it still exists:
        its name stays taken and it can be killed by id). Decoded again only when a node
        changed (nimbus reads them every round); each call returns copies of its own."""
        entries = self._read_children(self._path("topologies"), TopologyInfo.from_dict, keep_malformed=True,
                                      cached=True)
        return {tid: None if info is None else replace(info) for tid, info in entries.items()}

    def set_topology_status(self, topology_id: str, status: str) -> bool:
        """Change a topology's status; False when the topology does not exist (or is malformed)."""
        if status not in TOPOLOGY_STATUSES:
            raise ValueError(f"status must be one of {TOPOLOGY_STATUSES}, got {status!r}")
        path = self._path("topologies", topology_id)

        def update() -> bool:
            try:
                data, stat = self._op("get", path)
            except NoNodeError:
                return False
            info = self._decode(path, data, TopologyInfo.from_dict)
            if info is None:
                return False
            info.status = status
            try:
                self._op("set", path, encode(path, info.to_dict()), version=stat.version)
            except BadVersionError:
                raise ForceRetryError() from None
            return True

        return self._retry(update)

    def remove_topology(self, topology_id: str) -> None:
        self._delete(self._path("topologies", topology_id))

    def watch_topology(self, topology_id: str, callback: Callable[[TopologyInfo | None], None]) -> Watch:
        """Call ``callback(info)`` now and whenever the topology changes (None: gone or malformed)."""
        path = self._path("topologies", topology_id)
        return self._watch_node(path, TopologyInfo.from_dict, callback, f"topology {topology_id}")

    # -- what operators ask of a topology's workers --------------------------------------
    def operator_requests(self, topology_id: str) -> OperatorRequests | None:
        """The topology's operator requests; None when there are none (or the node is malformed)."""
        return self._read(self._path("operations", topology_id), OperatorRequests.from_dict)

    def update_operator_requests(self, topology_id: str,
                                 change: Callable[[OperatorRequests], OperatorRequests]) -> OperatorRequests:
        """Apply ``change`` to the topology's requests (an empty set when there are none or
        the node is malformed) and write the result, retried when another writer came between;
        the requests written."""
        path = self._path("operations", check_name(topology_id, "topology id"))
        acl = self._acl(path)

        def update() -> OperatorRequests:
            try:
                data, stat = self._op("get", path)
            except NoNodeError:
                data, stat = None, None
            current = self._decode(path, data, OperatorRequests.from_dict) if data is not None else None
            new = change(current or OperatorRequests())
            encoded = encode(path, new.to_dict())
            try:
                if stat is None:
                    self._op("create", path, encoded, acl=acl, makepath=True)
                else:
                    self._op("set", path, encoded, version=stat.version)
            except (NodeExistsError, BadVersionError):
                raise ForceRetryError() from None
            return new

        return self._retry(update)

    def watch_operator_requests(self, topology_id: str,
                                callback: Callable[[OperatorRequests | None], None]) -> Watch:
        """Call ``callback(requests)`` now and whenever they change (None: none, or malformed)."""
        path = self._path("operations", topology_id)
        return self._watch_node(path, OperatorRequests.from_dict, callback, f"operator requests of {topology_id}")

    # -- topology secrets (daemons only) ----------------------------------------------
    def set_topology_secrets(self, topology_id: str, secrets: TopologySecrets) -> None:
        """Store a topology's secrets (daemons only), then create its beats and errors parents
        with ACLs that let its workers write there."""
        path = self._path("credentials", check_name(topology_id, "topology id"))
        self._topology_digests[topology_id] = Credential(topology_user(topology_id),
                                                         secrets.zk_password).digest_id
        self._write(path, secrets.to_dict())
        for part in ("workerbeats", "errors"):
            parent = self._path(part, topology_id)
            self._retry(self.client.ensure_path, parent, self._acl(parent))

    def topology_secrets(self, topology_id: str) -> TopologySecrets | None:
        """A topology's secrets; None when missing or malformed."""
        return self._read(self._path("credentials", topology_id), TopologySecrets.from_dict)

    # -- state lineage (daemons only) ---------------------------------------------------
    def state_lineage(self, name: str) -> StateLineage:
        """Whose state the topologies named ``name`` kept (empty when none, or malformed)."""
        found = self._read(self._path("state-lineage", check_name(name, "topology name")), StateLineage.from_dict)
        return found if found is not None else StateLineage()

    def set_state_lineage(self, name: str, lineage: StateLineage) -> None:
        self._write(self._path("state-lineage", check_name(name, "topology name")), lineage.to_dict())

    # -- API tokens (daemons only) ----------------------------------------------------
    def set_api_tokens(self, tokens: PublishedTokens) -> None:
        """Publish the API token table (the leading nimbus) for the supervisors' endpoints."""
        self._write(self._path("tokens"), tokens.to_dict())

    def watch_api_tokens(self, callback: Callable[[PublishedTokens | None], None]) -> Watch:
        """Call ``callback(tokens)`` now and on every change (None: not published or malformed)."""
        return self._watch_node(self._path("tokens"), PublishedTokens.from_dict, callback, "API tokens")

    # -- supervisors ------------------------------------------------------------------
    def register_supervisor(self, info: SupervisorInfo) -> None:
        """Create or refresh this supervisor's ephemeral node; it is re-created after a
        session expiry until ``unregister_supervisor`` or ``close``."""
        path = self._path("supervisors", check_name(info.id, "supervisor id"))
        self._put_ephemeral(path, encode(path, info.to_dict()))

    def unregister_supervisor(self, supervisor_id: str) -> None:
        self._remove_ephemeral(self._path("supervisors", supervisor_id))

    def supervisor_away(self, info: SupervisorInfo) -> None:
        """A clean stop that means to come back: replace the ephemeral node by a persistent
        one marked ``away`` (closing the session would delete the ephemeral one, and nimbus
        would move the node's executors at once). The next ``register_supervisor`` replaces
        it; nimbus forgets it after ``supervisor.restart.grace.secs``."""
        path = self._path("supervisors", check_name(info.id, "supervisor id"))
        data = encode(path, {**info.to_dict(), "away": True})

        def put() -> None:
            stat = self._op("exists", path)
            if stat is None:
                try:
                    self._op("create", path, data, acl=self._acl(path), makepath=True)
                except NodeExistsError:
                    raise ForceRetryError() from None
            else:
                self._replace(path, data, stat.version, ephemeral=False)

        with self._ephemeral_lock:
            self._ephemerals.pop(path, None)
            self._retry(put)

    def remove_supervisor_if_away(self, supervisor_id: str) -> bool:
        """Delete a supervisor's node if it is still the persistent ``away`` one (nimbus,
        once the restart grace has passed); False when it is live again or gone."""
        path = self._path("supervisors", check_name(supervisor_id, "supervisor id"))

        def remove() -> bool:
            try:
                data, stat = self._op("get", path)
            except NoNodeError:
                return False
            info = self._decode(path, data, SupervisorInfo.from_dict)
            if stat.ephemeralOwner != 0 or (info is not None and not info.away):
                return False
            try:
                self._op("delete", path, version=stat.version)
            except (NoNodeError, BadVersionError):
                return False
            return True

        return self._retry(remove)

    def supervisor(self, supervisor_id: str) -> SupervisorInfo | None:
        return self._read(self._path("supervisors", supervisor_id), SupervisorInfo.from_dict)

    def supervisors(self) -> dict[str, SupervisorInfo]:
        """Every well-formed supervisor node (decoded again only when it changed)."""
        return self._read_children(self._path("supervisors"), SupervisorInfo.from_dict, cached=True)

    def watch_supervisors(self, callback: Callable[[dict[str, SupervisorInfo]], None]) -> Watch:
        """Call ``callback({supervisor id: SupervisorInfo})`` now and on any change."""
        return self._watch_children(self._path("supervisors"), SupervisorInfo.from_dict, dict,
                                    callback, "supervisors")

    # -- worker beats of the previous layout (a rolling upgrade) -------------------------
    def worker_beat(self, beat: WorkerBeat) -> None:
        """What a worker of an earlier squall writes (workers of this version report through
        their supervisor instead); kept for tests that play such a worker."""
        topology = check_name(beat.topology_id, "topology id")
        self._write(self._path("workerbeats", topology, slot_name(beat.node, beat.port)), beat.to_dict())

    def worker_beats(self, topology_id: str) -> dict[Slot, WorkerBeat]:
        """The beats workers of an earlier squall wrote for the topology, keyed by (node, port);
        malformed ones are skipped. One request when there are none."""
        beats = self._read_children(self._path("workerbeats", topology_id), WorkerBeat.from_dict)
        return {(b.node, b.port): b for b in beats.values()}

    def remove_worker_beat(self, topology_id: str, node: str, port: int) -> None:
        self._delete(self._path("workerbeats", topology_id, slot_name(node, port)))

    # -- errors -----------------------------------------------------------------------
    def report_error(self, topology_id: str, error: ErrorInfo, kept: int | None = None) -> None:
        """Append an error to its component's list, keeping the last ``kept``
        (default ``topology.errors.kept``). Callers throttle; this writes every call."""
        kept = self.errors_kept if kept is None else max(1, int(kept))
        path = self._path("errors", check_name(topology_id, "topology id"),
                          check_name(error.component, "component id"))
        entry = error.to_dict()
        acl = self._acl(path)
        if len(error.error) > MAX_ERROR_CHARS:
            entry["error"] = error.error[:MAX_ERROR_CHARS] + "... [truncated]"

        def append() -> None:
            try:
                data, stat = self._op("get", path)
            except NoNodeError:
                try:
                    self._op("create", path, encode(path, {"errors": [entry]}), acl=acl, makepath=True)
                    return
                except NodeExistsError:
                    raise ForceRetryError() from None
            entries = [e.to_dict() for e in self._decode_errors(path, data)]
            entries = (entries + [entry])[-kept:]
            try:
                self._op("set", path, encode(path, {"errors": entries}), version=stat.version)
            except BadVersionError:
                raise ForceRetryError() from None

        self._retry(append)

    def errors(self, topology_id: str, component: str | None = None) -> list[ErrorInfo]:
        """Kept errors of one component, or of all components, oldest first."""
        parent = self._path("errors", topology_id)
        components = [component] if component is not None else self._children(parent)
        paths = [f"{parent}/{check_name(c, 'component id')}" for c in components]
        out: list[ErrorInfo] = []
        for path, data in self._get_many(paths).items():
            if data is not None:
                out.extend(self._decode_errors(path, data))
        return sorted(out, key=lambda e: e.time)

    def _decode_errors(self, path: str, data: bytes) -> list[ErrorInfo]:
        raw = self._decode(path, data, lambda d: as_list(field_value(d, "errors"), "errors"))
        out = []
        for item in raw or []:
            try:
                out.append(ErrorInfo.from_dict(as_dict(item, "error entry")))
            except (ValueError, TypeError) as exc:
                self._malformed(path, f"error entry skipped: {exc}")
        return out

    # -- nimbus -----------------------------------------------------------------------
    def elect_nimbus(self, identifier: str,
                     on_leadership: Callable[[threading.Event], None]) -> NimbusElection:
        """Contend for leadership on a background thread.

        When this contender wins, ``on_leadership(lost)`` runs on the election thread; it may
        return at once or keep running until ``lost`` is set. Leadership is held until the
        session is lost or the election is cancelled (``lost`` is set then); afterwards the
        contender queues again. While disconnected ``election.is_leader`` is False.
        """
        election = NimbusElection(self, identifier, on_leadership,
                                  pause=float(self.conf["nimbus.leader.poll.secs"]))
        self._elections.append(election)
        return election.start()

    def nimbus_contenders(self) -> list[str]:
        """Identifiers of all contenders, leader first (malformed ones left out)."""
        return [ident for ident in self._contender_entries() if ident is not None]

    def nimbus_leader(self) -> str | None:
        """Identifier of the current leader; None when there is none or its node is malformed."""
        entries = self._contender_entries()
        return entries[0] if entries else None

    def _contender_entries(self) -> list[str | None]:
        parent = self._path("nimbus", "leader")
        nodes = contender_order(self._children(parent))
        out: list[str | None] = []
        for path, data in self._get_many([f"{parent}/{n}" for n in nodes]).items():
            if data is None:
                continue  # left meanwhile
            ident = self._decode(path, data, NimbusId.from_dict)
            out.append(ident.id if ident is not None else None)
        return out

    # -- teardown ---------------------------------------------------------------------
    def teardown_topology(self, topology_id: str) -> None:
        """Remove the assignment and the supervisors' parts of it, worker beats and errors;
        the topology node last."""
        check_name(topology_id, "topology id")
        self.remove_assignment(topology_id)
        for part in ("workerbeats", "errors"):
            self._delete(self._path(part, topology_id), recursive=True)
        self._delete(self._path("operations", topology_id))
        self._delete(self._path("credentials", topology_id))
        self._topology_digests.pop(topology_id, None)
        self._delete(self._path("topologies", topology_id))

    # -- internals ----------------------------------------------------------------------
    def _topology_digest(self, topology_id: str) -> str | None:
        """The digest identity of a topology's credential: a worker knows its own; daemons
        read (and cache) it from the topology's secrets. None when unknown."""
        if self.auth.topology_id is not None:
            cred = self.auth.credential
            return cred.digest_id if cred is not None and topology_id == self.auth.topology_id else None
        digest = self._topology_digests.get(topology_id)
        if digest is None:
            secrets = self.topology_secrets(topology_id)
            if secrets is not None:
                digest = Credential(topology_user(topology_id), secrets.zk_password).digest_id
                self._topology_digests[topology_id] = digest
        return digest
