"""ClusterState: the facade through which daemons read and write ZooKeeper (kazoo).

Storm's IStormClusterState in Python: typed reads, writes and watches of the records in
``records``, with the watchers of ``watchers`` and the elections of ``election`` running
through the small interfaces this class gives them (``WatchSupport``, ``ElectionSupport``).

Layout under ``zookeeper.root`` (default ``/squall``); every node holds JSON ``{"v": 1, ...}``:

    /topologies/<id>                         TopologyInfo: metadata and status (no code)
    /assignments/<id>                        Assignment
    /supervisors/<id>                        SupervisorInfo (ephemeral)
    /workerbeats/<topology>/<node>-<port>    WorkerBeat
    /errors/<topology>/<component>           {"errors": [ErrorInfo, ...]}, oldest first, bounded
    /nimbus/leader/<lock node>               kazoo Lock contenders, data {"id": identifier}
    /credentials/<topology>                  TopologySecrets (daemons only)
    /tokens                                  PublishedTokens: the API token hashes (daemons only)

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

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.recipe.lock import Lock
from kazoo.retry import ForceRetryError, KazooRetry, RetryFailedError

from squall.config import load_defaults
from squall.daemons.state.acls import Credential, ZkAuth, node_acl, parts_of, topology_of, topology_user
from squall.daemons.state.election import NimbusElection, contender_order
from squall.daemons.state.records import (
    MAX_ERROR_CHARS,
    TOPOLOGY_STATUSES,
    Assignment,
    ErrorInfo,
    NimbusId,
    PublishedTokens,
    Slot,
    SupervisorInfo,
    TopologyInfo,
    TopologySecrets,
    WorkerBeat,
    as_dict,
    as_list,
    check_name,
    encode,
    field_value,
    parse_node,
    slot_name,
)
from squall.daemons.state.watchers import ChildrenWatcher, NodeWatcher, Watch, Watcher

log = structlog.get_logger("squall.state")
# kazoo's own lines ("Connection dropped: ..." on every retry) repeat, in another format,
# what this module logs once per outage: only its errors get through.
KAZOO_LOG = logging.getLogger("squall.state.kazoo")
KAZOO_LOG.setLevel(logging.ERROR)

T = TypeVar("T")

# Failures that mean "ZooKeeper is not reachable right now"; they become ClusterStateError.
_UNAVAILABLE = (RetryFailedError, ConnectionLoss, SessionExpiredError, OperationTimeoutError,
                KazooTimeoutError)


# Whatever a parser may raise on hostile data: the node is skipped and counted, never fatal.
_DECODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError,
                  RecursionError)
# How long ``close`` waits for kazoo to end the session; past it the session is left to
# expire on the server (a daemon told to stop must not wait on an unreachable ZooKeeper).
CLOSE_TIMEOUT_SECS = 3.0


class ClusterStateError(RuntimeError):
    """ZooKeeper could not be reached, refused a request (NoAuth), or the state is closed;
    the message says for what."""


class _Refused(Exception):
    """ZooKeeper answered NoAuth to one request (named in the message); never retried."""


class ClusterState:
    """Typed access to squall's ZooKeeper state for nimbus, supervisors and workers."""

    def __init__(self, conf: Mapping[str, Any], auth: ZkAuth | None = None) -> None:
        """``auth``: a worker's topology credential; daemons leave it None and authenticate
        with ``zookeeper.auth.user`` / ``zookeeper.auth.password`` or ``$SQUALL_ZOOKEEPER_PASSWORD``
        (``ZkAuth.from_conf``; no user: no ACLs)."""
        merged = load_defaults()
        merged.update(conf)
        self.conf = merged
        self.auth = auth if auth is not None else ZkAuth.from_conf(merged)
        self._topology_digests: dict[str, str] = {}  # topology id -> digest identity
        root = "/" + str(merged["zookeeper.root"]).strip("/")
        self.root = root.rstrip("/") or "/"
        port = int(merged["zookeeper.port"])
        self.hosts = ",".join(h if ":" in h else f"{h}:{port}" for h in merged["zookeeper.servers"])
        self.session_timeout = merged["zookeeper.session.timeout.ms"] / 1000.0
        self.connection_timeout = merged["zookeeper.connection.timeout.ms"] / 1000.0
        self.errors_kept = int(merged["topology.errors.kept"])
        self.malformed_reads = 0  # count of malformed node data skipped
        self._client: KazooClient | None = None
        self._closed = threading.Event()
        self._session_generation = 0  # bumped on every session loss
        self._connections = 0  # bumped on every (re)connection
        self._ephemerals: dict[str, bytes] = {}  # path -> data we keep alive across sessions
        self._ephemeral_lock = threading.Lock()
        self._watchers: list[Watcher] = []
        self._watchers_lock = threading.Lock()
        self._elections: list[NimbusElection] = []
        self._restore_wanted = threading.Event()
        self._restorer: threading.Thread | None = None
        self._background = False  # started with background=True: watches may wait for a connection
        self._base_paths_wanted = False  # started before ZooKeeper answered: made on the first connection

    # -- lifecycle --------------------------------------------------------------------
    def start(self, background: bool = False) -> ClusterState:
        """Connect (within ``zookeeper.connection.timeout.ms``) and create the base paths.

        Past the timeout ClusterStateError, unless ``background``: then the session keeps
        connecting (``connected`` is False meanwhile), the base paths are made and watches
        registered meanwhile are read on the first connection (a worker that must start
        while ZooKeeper is away)."""
        if self._client is not None:
            return self
        cred = self.auth.credential
        client = KazooClient(
            hosts=self.hosts, timeout=self.session_timeout,
            auth_data=[cred.auth_data] if cred is not None else None,
            default_acl=self._acl(self.root) if self.root != "/" else None,
            # Reconnect forever, promptly; commands retry until the session would be gone.
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0),
            command_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0,
                                     deadline=self.session_timeout),
            logger=KAZOO_LOG,
        )
        client.add_listener(self._on_state)
        try:
            if background:  # kazoo's start() would stop the client on a timeout
                client.start_async().wait(self.connection_timeout)
            else:
                client.start(timeout=self.connection_timeout)
        except KazooTimeoutError:
            client.close()
            raise ClusterStateError(
                f"cannot connect to ZooKeeper at {self.hosts} within {self.connection_timeout}s: is it "
                "running there (zookeeper.servers, zookeeper.port)?") from None
        self._client = client
        self._background = background
        if client.connected:
            self._ensure_base_paths()
        else:
            self._base_paths_wanted = True
            log.info("ZooKeeper not reachable yet; connecting in the background", zk=self.hosts,
                     waited_secs=self.connection_timeout)  # the caller says what it does meanwhile
        self._restorer = threading.Thread(target=self._restore_loop, name="zk-restore", daemon=True)
        self._restorer.start()
        if client.connected:
            log.info("connected to ZooKeeper", zk=self.hosts, root=self.root,
                     auth=self.auth.credential.user if self.auth.credential else None)
        return self

    def _ensure_base_paths(self) -> None:
        client = self.client
        for part in ("topologies", "assignments", "supervisors", "workerbeats", "errors",
                     "nimbus", "credentials"):
            self._retry(client.ensure_path, self._path(part), self._acl(self._path(part)))
        self._base_paths_wanted = False
        if self.auth.enabled and self.auth.topology_id is None:
            self._warn_if_open(client)

    def _warn_if_open(self, client: KazooClient) -> None:
        """A tree made before ACLs were on keeps its open nodes: say so, once, at start."""
        try:
            acls, _ = client.get_acls(self.root)
        except (KazooException, KazooTimeoutError):
            return
        if any(acl.id.scheme == "world" for acl in acls):
            log.warning("SECURITY: the ZooKeeper tree was created without ACLs and stays open to "
                        "anyone; migrate it (README, Security: ZooKeeper)", root=self.root)

    def close(self, timeout: float | None = None) -> None:
        """Step down from elections and close the session (its ephemeral nodes go with it),
        waiting at most ``timeout`` (default CLOSE_TIMEOUT_SECS) for ZooKeeper."""
        if self._closed.is_set():
            return
        for election in list(self._elections):
            election.cancel()
        self._closed.set()
        self._restore_wanted.set()
        if self._restorer is not None:
            self._restorer.join(CLOSE_TIMEOUT_SECS)
        client = self._client
        if client is None:
            return
        # kazoo's stop waits for its connection thread without a bound when the server
        # does not answer: do it on a helper thread and give up after the deadline.
        done = threading.Event()

        def stop() -> None:
            try:
                client.stop()
                client.close()
            except Exception as exc:  # noqa: BLE001 - closing is best effort
                log.info("closing the ZooKeeper client failed", error=repr(exc))
            finally:
                done.set()

        threading.Thread(target=stop, name="zk-close", daemon=True).start()
        if done.wait(timeout if timeout is not None else CLOSE_TIMEOUT_SECS):
            log.info("ZooKeeper session closed", zk=self.hosts, root=self.root)
        else:
            log.warning("ZooKeeper did not confirm the session close in time; leaving it to expire",
                        zk=self.hosts, timeout_secs=timeout if timeout is not None else CLOSE_TIMEOUT_SECS)

    def __enter__(self) -> ClusterState:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def client(self) -> KazooClient:
        """The underlying kazoo client (for tools and tests)."""
        if self._client is None:
            raise ClusterStateError("ClusterState is not started")
        return self._client

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.connected

    # -- what elections use (ElectionSupport) -----------------------------------------
    @property
    def connections(self) -> int:
        """How many times the client has (re)connected; a change means "just reconnected"
        (nimbus then waits before judging liveness by what it could not hear)."""
        return self._connections

    @property
    def session_generation(self) -> int:
        """Bumped on every session loss."""
        return self._session_generation

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
        return self._read_children(self._path("topologies"), TopologyInfo.from_dict)

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

    # -- API tokens (daemons only) ----------------------------------------------------
    def set_api_tokens(self, tokens: PublishedTokens) -> None:
        """Publish the API token table (the leading nimbus) for the supervisors' endpoints."""
        self._write(self._path("tokens"), tokens.to_dict())

    def watch_api_tokens(self, callback: Callable[[PublishedTokens | None], None]) -> Watch:
        """Call ``callback(tokens)`` now and on every change (None: not published or malformed)."""
        return self._watch_node(self._path("tokens"), PublishedTokens.from_dict, callback, "API tokens")

    # -- assignments ------------------------------------------------------------------
    def set_assignment(self, assignment: Assignment) -> None:
        path = self._path("assignments", check_name(assignment.topology_id, "topology id"))
        self._write(path, assignment.to_dict())

    def assignment(self, topology_id: str) -> Assignment | None:
        return self._read(self._path("assignments", topology_id), Assignment.from_dict)

    def assignment_exists(self, topology_id: str) -> bool:
        """Whether the assignment node exists (ZooKeeper checks no ACL for this)."""
        return self._retry(self._op, "exists", self._path("assignments", topology_id)) is not None

    def assignment_ids(self) -> list[str]:
        return self._children(self._path("assignments"))

    def assignments(self) -> dict[str, Assignment]:
        return self._read_children(self._path("assignments"), Assignment.from_dict)

    def remove_assignment(self, topology_id: str) -> None:
        self._delete(self._path("assignments", topology_id))

    def watch_assignments(self, callback: Callable[[dict[str, Assignment]], None]) -> Watch:
        """Call ``callback({topology id: Assignment})`` now and on any change of the set or
        of any assignment's data. Malformed assignments are left out."""
        return self._watch_children(self._path("assignments"), Assignment.from_dict, dict,
                                    callback, "assignments")

    def watch_assignment(self, topology_id: str, callback: Callable[[Assignment | None], None]) -> Watch:
        """Call ``callback(assignment)`` now and whenever one topology's assignment changes."""
        path = self._path("assignments", topology_id)
        return self._watch_node(path, Assignment.from_dict, callback, f"assignment {topology_id}")

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
        return self._read_children(self._path("supervisors"), SupervisorInfo.from_dict)

    def watch_supervisors(self, callback: Callable[[dict[str, SupervisorInfo]], None]) -> Watch:
        """Call ``callback({supervisor id: SupervisorInfo})`` now and on any change."""
        return self._watch_children(self._path("supervisors"), SupervisorInfo.from_dict, dict,
                                    callback, "supervisors")

    # -- worker beats -----------------------------------------------------------------
    def worker_beat(self, beat: WorkerBeat) -> None:
        topology = check_name(beat.topology_id, "topology id")
        self._write(self._path("workerbeats", topology, slot_name(beat.node, beat.port)), beat.to_dict())

    def worker_beats(self, topology_id: str) -> dict[Slot, WorkerBeat]:
        """The topology's beats keyed by (node, port); malformed ones are skipped."""
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
        """Remove the assignment, worker beats and errors; the topology node last."""
        check_name(topology_id, "topology id")
        self._delete(self._path("assignments", topology_id))
        for part in ("workerbeats", "errors"):
            self._delete(self._path(part, topology_id), recursive=True)
        self._delete(self._path("credentials", topology_id))
        self._topology_digests.pop(topology_id, None)
        self._delete(self._path("topologies", topology_id))

    # -- internals: paths, reads, writes ----------------------------------------------
    def _path(self, *parts: str) -> str:
        for part in parts:
            check_name(part, "path element")
        base = "" if self.root == "/" else self.root
        return base + "/" + "/".join(parts)

    def _acl(self, path: str) -> list[Any]:
        """The ACL a node created at ``path`` gets (see ``acls.node_acl``)."""
        parts = parts_of(path, self.root)
        topology = topology_of(parts)
        digest = self._topology_digest(topology) if topology and self.auth.enabled else None
        return node_acl(parts, self.auth.daemon_id, digest)

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

    def _op(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """One ZooKeeper request, waiting at most the session timeout: kazoo's synchronous
        calls wait forever while it reconnects, which would hang a daemon whose ZooKeeper
        is gone instead of letting it fail."""
        try:
            return getattr(self.client, name + "_async")(*args, **kwargs).get(timeout=self.session_timeout)
        except NoAuthError:
            raise _Refused(f"{name} {args[0]}") from None

    def _retry(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed.is_set():
            raise ClusterStateError("ClusterState is closed")
        client = self.client
        try:
            return client.retry(fn, *args, **kwargs)
        except (NoAuthError, _Refused) as exc:
            what = str(exc) if isinstance(exc, _Refused) else \
                f"{getattr(fn, '__name__', repr(fn))} {_first_path(args)}".strip()
            who = self.auth.credential.user if self.auth.credential else "an unauthenticated client"
            raise ClusterStateError(f"ZooKeeper refused {what} to {who}: not authorized (check "
                                    "zookeeper.auth.user / zookeeper.auth.password or "
                                    "$SQUALL_ZOOKEEPER_PASSWORD)") from None
        except _UNAVAILABLE as exc:
            if self._closed.is_set():
                raise ClusterStateError("ClusterState is closed") from None
            name = getattr(fn, "__name__", repr(fn))
            raise ClusterStateError(f"ZooKeeper at {self.hosts} unavailable ({name}): {exc!r}") from exc

    def _malformed(self, path: str, reason: str) -> None:
        self.malformed_reads += 1
        log.warning("malformed ZooKeeper data skipped", path=path, reason=reason)

    def _decode(self, path: str, data: bytes | None, parse: Callable[[dict[str, Any]], T]) -> T | None:
        try:
            return parse_node(data, parse)
        except _DECODE_ERRORS as exc:
            self._malformed(path, f"{type(exc).__name__}: {exc}")
            return None

    def _decoder(self, parse: Callable[[dict[str, Any]], T]) -> Callable[[str, bytes], T | None]:
        return lambda path, data: self._decode(path, data, parse)

    def _read(self, path: str, parse: Callable[[dict[str, Any]], T]) -> T | None:
        try:
            data, _ = self._retry(self._op, "get", path)
        except NoNodeError:
            return None
        return self._decode(path, data, parse)

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self._retry(self._op, "get_children", path))
        except NoNodeError:
            return []

    def _get_many(self, paths: list[str]) -> dict[str, bytes | None]:
        """Data of many nodes with requests in flight together; None for missing nodes."""
        def fetch() -> dict[str, bytes | None]:
            pending = [(p, self.client.get_async(p)) for p in paths]
            out: dict[str, bytes | None] = {}
            for path, result in pending:
                try:
                    out[path] = result.get(timeout=self.session_timeout)[0]
                except NoNodeError:
                    out[path] = None
            return out

        return self._retry(fetch) if paths else {}

    def _read_children(self, parent: str, parse: Callable[[dict[str, Any]], T]) -> dict[str, T]:
        names = self._children(parent)
        fetched = self._get_many([f"{parent}/{n}" for n in names])
        out: dict[str, T] = {}
        for name in names:
            data = fetched[f"{parent}/{name}"]
            if data is None:
                continue  # deleted between listing and reading
            value = self._decode(f"{parent}/{name}", data, parse)
            if value is not None:
                out[name] = value
        return out

    def _write(self, path: str, payload: Mapping[str, Any]) -> None:
        data = encode(path, payload)
        acl = self._acl(path)

        def put() -> None:
            try:
                self._op("set", path, data)
            except NoNodeError:
                try:
                    self._op("create", path, data, acl=acl, makepath=True)
                except NodeExistsError:
                    raise ForceRetryError() from None

        self._retry(put)

    def _delete(self, path: str, recursive: bool = False) -> None:
        def remove() -> None:
            try:
                if recursive:
                    self._delete_tree(path)
                else:
                    self._op("delete", path)
            except NoNodeError:
                pass
            except NotEmptyError:
                raise ForceRetryError() from None  # a child appeared meanwhile: delete again

        self._retry(remove)

    def _delete_tree(self, path: str) -> None:
        # Inside a retried call: every request has the session timeout as its deadline (a
        # child appearing meanwhile raises NotEmptyError: the caller retries).
        try:
            for child in self._op("get_children", path):
                self._delete_tree(f"{path}/{child}")
            self._op("delete", path)
        except NoNodeError:
            pass

    # -- internals: ephemeral nodes that outlive sessions -----------------------------
    def _put_ephemeral(self, path: str, data: bytes) -> None:
        with self._ephemeral_lock:
            self._ephemerals[path] = data
            self._retry(self._ensure_ephemeral, path, data)

    def _remove_ephemeral(self, path: str) -> None:
        with self._ephemeral_lock:
            self._ephemerals.pop(path, None)
            self._delete(path)

    def _ensure_ephemeral(self, path: str, data: bytes) -> None:
        client = self.client
        client_id = client.client_id
        if client_id is None:
            raise ConnectionLoss("not connected")
        stat = self._op("exists", path)
        if stat is not None and stat.ephemeralOwner != client_id[0]:
            # Left by an earlier session of ours (a restart, an expiry not yet processed, or
            # the persistent "away" node of a clean stop).
            log.info("replacing a node of another session", path=path)
            self._replace(path, data, stat.version, ephemeral=True)
            return
        if stat is None:
            try:
                self._op("create", path, data, acl=self._acl(path), ephemeral=True, makepath=True)
            except NodeExistsError:
                raise ForceRetryError() from None
        else:
            self._op("set", path, data)

    def _replace(self, path: str, data: bytes, version: int, ephemeral: bool) -> None:
        """Delete and re-create ``path`` in one transaction: watchers (nimbus) never see it
        missing in between. ForceRetryError when the node changed meanwhile."""
        tx = self.client.transaction()
        tx.delete(path, version=version)
        tx.create(path, data, acl=self._acl(path), ephemeral=ephemeral)
        results = tx.commit_async().get(timeout=self.session_timeout)
        if any(isinstance(r, Exception) for r in results):
            raise ForceRetryError()

    # -- internals: connection state and the restore thread ---------------------------
    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: set flags and events only, never block.
        if state == KazooState.LOST:
            self._session_generation += 1
            for election in list(self._elections):
                election.on_session_lost()
        elif state == KazooState.SUSPENDED:
            for election in list(self._elections):
                election.on_suspended(True)
        else:
            self._connections += 1
            for election in list(self._elections):
                election.on_suspended(False)
            self._restore_wanted.set()

    def request_resync(self) -> None:
        """Resync every watch soon, on the restore thread (``WatchSupport``)."""
        self._restore_wanted.set()

    def _restore_loop(self) -> None:
        """Re-create our ephemeral nodes and resync watches after every (re)connection."""
        while True:
            self._restore_wanted.wait()
            if self._closed.is_set():
                return
            if not self.connected:
                self._closed.wait(0.1)  # the next CONNECTED sets the event again
                continue
            self._restore_wanted.clear()
            try:
                self._restore_once()
            except (KazooException, KazooTimeoutError, ClusterStateError) as exc:
                if self._closed.is_set():
                    return
                log.info("restore after reconnect failed, retrying", error=repr(exc))
                self._restore_wanted.set()
                self._closed.wait(0.5)

    def _restore_once(self) -> None:
        if self._base_paths_wanted:
            self._ensure_base_paths()
        with self._ephemeral_lock:
            for path, data in list(self._ephemerals.items()):
                self._ensure_ephemeral_once(path, data)
        with self._watchers_lock:
            self._watchers = [w for w in self._watchers if w.active]
            watchers = list(self._watchers)
        for watcher in watchers:
            watcher.resync()

    def _ensure_ephemeral_once(self, path: str, data: bytes) -> None:
        for _ in range(5):
            try:
                self._ensure_ephemeral(path, data)
                return
            except ForceRetryError:
                continue

    # -- internals: watches -----------------------------------------------------------
    def _add_watcher(self, watcher: Watcher) -> None:
        with self._watchers_lock:
            self._watchers.append(watcher)
        try:
            if self.connected or not self._background:
                self._retry(watcher.refresh)
                return
        except BaseException as exc:
            if not (isinstance(exc, ClusterStateError) and self._background and not self.connected):
                with self._watchers_lock:
                    self._watchers.remove(watcher)
                raise
        # Started in the background and cut off: read (and called back) on the next connection.
        self._restore_wanted.set()

    def _watch_node(self, path: str, parse: Callable[[dict[str, Any]], Any],
                    callback: Callable[[Any], None], what: str) -> Watch:
        handle = Watch(what)
        self._add_watcher(NodeWatcher(self, handle, path, self._decoder(parse), callback))
        return handle

    def _watch_children(self, parent: str, parse: Callable[[dict[str, Any]], Any],
                        transform: Callable[[dict[str, Any]], Any], callback: Callable[[Any], None],
                        what: str) -> Watch:
        handle = Watch(what)
        if self.connected or not self._background:
            self._retry(self.client.ensure_path, parent, self._acl(parent))
        self._add_watcher(ChildrenWatcher(self, handle, parent, self._decoder(parse), transform,
                                           callback))
        return handle


def _first_path(args: tuple[Any, ...]) -> str:
    """The first path-like argument of a retried call, for error messages."""
    for arg in args:
        if isinstance(arg, str) and arg.startswith("/"):
            return arg
    return ""
