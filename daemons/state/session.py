"""ZkSession: one kazoo session for squall's daemons and workers, kept usable.

The part of the cluster-state facade that knows nothing of squall's records: connecting
(optionally in the background), closing within a deadline, one request with a deadline
(``_op``) and retries until the session timeout (``_retry``), turning NoAuth and an
unreachable ZooKeeper into ClusterStateError, and the restore thread that runs after every
(re)connection. What gets restored (ephemeral nodes, watches, base paths) is the
subclasses' business (``nodes.ZkNodes``, ``cluster_state.ClusterState``).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Self, TypeVar

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionLoss,
    KazooException,
    NoAuthError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry, RetryFailedError

from squall.config import load_defaults
from squall.daemons.state.acls import ZkAuth
from squall.daemons.state.election import NimbusElection
from squall.daemons.state.read_cache import ReadCache
from squall.daemons.state.watchers import Watcher
from squall.errors import SquallError

log = structlog.get_logger("squall.state")
# kazoo's own lines ("Connection dropped: ..." on every retry) repeat, in another format,
# what this module logs once per outage: only its errors get through.
KAZOO_LOG = logging.getLogger("squall.state.kazoo")
KAZOO_LOG.setLevel(logging.ERROR)

T = TypeVar("T")

# Failures that mean "ZooKeeper is not reachable right now"; they become ClusterStateError.
_UNAVAILABLE = (RetryFailedError, ConnectionLoss, SessionExpiredError, OperationTimeoutError,
                KazooTimeoutError)
# How long ``close`` waits for kazoo to end the session; past it the session is left to
# expire on the server (a daemon told to stop must not wait on an unreachable ZooKeeper).
CLOSE_TIMEOUT_SECS = 3.0


class ClusterStateError(SquallError, RuntimeError):
    """ZooKeeper could not be reached, refused a request (NoAuth), or the state is closed;
    the message says for what."""


_WRITES = frozenset({"set", "create", "delete"})  # requests that change a node (see _op)


class _Refused(Exception):
    """ZooKeeper answered NoAuth to one request (named in the message); never retried."""


class ZkSession:
    """A kazoo session with deadlines, retries and a restore thread (see the module doc)."""

    def __init__(self, conf: Mapping[str, Any], auth: ZkAuth | None = None) -> None:
        """``auth``: a worker's topology credential; daemons leave it None and authenticate
        with ``zookeeper.auth.user`` / ``zookeeper.auth.password`` or ``$SQUALL_ZOOKEEPER_PASSWORD``
        (``ZkAuth.from_conf``; no user: no ACLs)."""
        merged = load_defaults()
        merged.update(conf)
        self.conf = merged
        self.auth = auth if auth is not None else ZkAuth.from_conf(merged)
        root = "/" + str(merged["zookeeper.root"]).strip("/")
        self.root = root.rstrip("/") or "/"
        port = int(merged["zookeeper.port"])
        self.hosts = ",".join(h if ":" in h else f"{h}:{port}" for h in merged["zookeeper.servers"])
        self.session_timeout = merged["zookeeper.session.timeout.ms"] / 1000.0
        self.connection_timeout = merged["zookeeper.connection.timeout.ms"] / 1000.0
        self.malformed_reads = 0  # count of malformed node data skipped
        self._client: KazooClient | None = None
        self._closed = threading.Event()
        self._session_generation = 0  # bumped on every session loss
        self._connections = 0  # bumped on every (re)connection
        self._ephemerals: dict[str, bytes] = {}  # path -> data we keep alive across sessions
        self._ephemeral_lock = threading.Lock()
        self._watchers: list[Watcher] = []
        self._reads = ReadCache()  # what cached reads know, kept by watches (nodes.ZkNodes._cached_reads)
        self._watchers_lock = threading.Lock()
        self._elections: list[NimbusElection] = []
        self._restore_wanted = threading.Event()
        self._restorer: threading.Thread | None = None
        self._background = False  # started with background=True: watches may wait for a connection
        self._base_paths_wanted = False  # started before ZooKeeper answered: made on the first connection

    # -- lifecycle --------------------------------------------------------------------
    def start(self, background: bool = False) -> Self:
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

    def _acl(self, path: str) -> list[Any]:  # pragma: no cover - abstract
        """The ACL a node created at ``path`` gets."""
        raise NotImplementedError

    def _ensure_base_paths(self) -> None:  # pragma: no cover - abstract
        """Create the layout's top-level nodes (on the first connection)."""
        raise NotImplementedError

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

    def __enter__(self) -> Self:
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

    # -- internals: one request, retried -------------------------------------------------
    def _op(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """One ZooKeeper request, waiting at most the session timeout: kazoo's synchronous
        calls wait forever while it reconnects, which would hang a daemon whose ZooKeeper
        is gone instead of letting it fail."""
        try:
            return getattr(self.client, name + "_async")(*args, **kwargs).get(timeout=self.session_timeout)
        except NoAuthError:
            raise _Refused(f"{name} {args[0]}") from None
        finally:
            if name in _WRITES:  # done or not (a lost reply may hide a done write): read it again
                self._reads.wrote(args[0], created_or_deleted=name != "set")

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

    # -- internals: connection state and the restore thread ---------------------------
    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: set flags and events only, never block.
        self._reads.forget_watches()  # events may be missed while cut off: cached reads ask again
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

    def _restore_once(self) -> None:  # pragma: no cover - abstract
        """One restore after a (re)connection; raises to be retried."""
        raise NotImplementedError


def _first_path(args: tuple[Any, ...]) -> str:
    """The first path-like argument of a retried call, for error messages."""
    for arg in args:
        if isinstance(arg, str) and arg.startswith("/"):
            return arg
    return ""
