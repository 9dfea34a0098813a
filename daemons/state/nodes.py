"""ZkNodes: reading, writing, deleting and watching ZooKeeper nodes for squall.

Paths under the root, the ACL every node is created with (``acls.node_acl``), decoding of
node data where malformed data is logged, counted in ``malformed_reads`` and skipped (never
raised), ephemeral nodes re-created after a session expiry, and watches re-synchronised
after a reconnect. The typed records on top are ``cluster_state.ClusterState``'s.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import structlog
from kazoo.exceptions import (
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.protocol.states import EventType, WatchedEvent
from kazoo.retry import ForceRetryError

from squall.daemons.state.acls import node_acl, open_to_anyone, outside_acl, outside_nodes, parts_of, topology_of
from squall.daemons.state.records import check_name, encode, parse_node
from squall.daemons.state.session import ClusterStateError, ZkSession
from squall.daemons.state.watchers import ChildrenWatcher, NodeWatcher, Watch, Watcher

log = structlog.get_logger("squall.state")

T = TypeVar("T")

# Whatever a parser may raise on hostile data: the node is skipped and counted, never fatal.
_DECODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError,
                  RecursionError)


class ZkNodes(ZkSession):
    """Node reads, writes, deletes, ephemerals and watches over a ``ZkSession``."""

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

    def _topology_digest(self, topology_id: str) -> str | None:  # pragma: no cover - abstract
        """The digest identity of a topology's credential (None when unknown)."""
        raise NotImplementedError

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

    def _read_children(self, parent: str, parse: Callable[[dict[str, Any]], T],
                       keep_malformed: bool = False, cached: bool = False) -> dict[str, Any]:
        """Children by name, decoded; a malformed one is left out, or with
        ``keep_malformed`` kept as None (it exists, its data cannot be used). ``cached``:
        watched reads (``read_cache``): the list and a child are read again only after
        ZooKeeper or a write of this process said they changed (large records read every
        round, such as assignments); the values returned are shared between reads and must
        not be changed."""
        if cached:
            names, decoded = self._cached_reads(parent, parse)
            paths = [f"{parent}/{n}" for n in names]
        else:
            names = self._children(parent)
            paths = [f"{parent}/{n}" for n in names]
            fetched = self._get_many(paths)
            decoded = {p: self._decode(p, fetched[p], parse) for p in paths if fetched[p] is not None}
        out: dict[str, T | None] = {}
        for name, path in zip(names, paths):
            if path not in decoded:
                continue  # deleted between listing and reading
            value = decoded[path]
            if value is not None or keep_malformed:
                out[name] = value
        return out

    def _watched_children(self, parent: str) -> list[str]:
        """``parent``'s children, listed again only after its children watch fired."""
        def fetch() -> list[str]:
            names = self._reads.names(parent)
            if names is not None:
                return names
            ticket = self._reads.ticket(("children", parent))
            try:
                names = sorted(self._op("get_children", parent, watch=self._on_read_event))
            except NoNodeError:
                return []  # no watch is left: listed again next time
            self._reads.put_names(parent, names, ticket)
            return names

        return self._retry(fetch)

    def _cached_reads(self, parent: str, parse: Callable[[dict[str, Any]], T]) -> tuple[list[str], dict[str, Any]]:
        """(children, path -> decoded value (None: malformed) of those that exist), asking
        ZooKeeper only for what changed since the last read (``read_cache``); data whose
        mzxid did not move is not decoded again."""
        names = self._watched_children(parent)
        paths = [f"{parent}/{n}" for n in names]
        self._reads.keep_only(parent, paths)

        def fetch() -> None:
            known = self._reads.values(parent)
            pending = []
            for path in self._reads.dirty(paths):
                ticket = self._reads.ticket(("data", path))
                pending.append((path, ticket, self.client.get_async(path, watch=self._on_read_event)))
            for path, ticket, result in pending:
                try:
                    data, stat = result.get(timeout=self.session_timeout)
                except NoNodeError:
                    self._reads.put_value(parent, path, None, ticket)
                    continue
                old = known.get(path)
                value = old[1] if old is not None and old[0] == stat.mzxid else self._decode(path, data, parse)
                self._reads.put_value(parent, path, (stat.mzxid, value), ticket)

        if paths:
            self._retry(fetch)
        values = self._reads.values(parent)
        return names, {p: values[p][1] for p in paths if p in values}

    def _on_read_event(self, event: WatchedEvent) -> None:
        # kazoo's event thread: mark what changed; the next read asks for it.
        if event.type != EventType.NONE:
            self._reads.invalidate(("children", event.path))
            if event.type != EventType.CHILD:
                self._reads.wrote(event.path, created_or_deleted=event.type == EventType.DELETED)

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

    # -- outside the root ----------------------------------------------------------------
    def open_outside(self) -> list[str]:
        """Nodes outside the root (``acls.outside_nodes``) that clients without credentials
        may write or create children under: each lets anyone fill ZooKeeper's memory."""
        out = []
        for path in outside_nodes(self.root):
            try:
                acl, _ = self._retry(self._op, "get_acls", path)
            except NoNodeError:
                continue
            if open_to_anyone(acl):
                out.append(path)
        return out

    def lock_outside(self) -> list[str]:
        """Give every open node of ``open_outside`` the ACL ``acls.outside_acl`` (the daemons
        may do anything, anyone may read); the paths changed. Needs the daemons' credential."""
        if self.auth.daemon_id is None or self.auth.topology_id is not None:
            raise ClusterStateError("locking ZooKeeper needs the daemons' credential "
                                    "(zookeeper.auth.user and its password)")
        changed = self.open_outside()
        for path in changed:
            self._retry(self._op, "set_acls", path, outside_acl(self.auth.daemon_id))
        return changed

    def _warn_if_outside_open(self) -> None:
        """Say at start, once, that clients without credentials can crash this ZooKeeper."""
        try:
            open_nodes = self.open_outside()
        except ClusterStateError:
            return
        if open_nodes:
            log.warning("SECURITY OFF: ZooKeeper lets clients without credentials write outside "
                        "squall's root: anyone who reaches it can fill its memory until it fails; "
                        "run `squall lock-zookeeper` (docs/operations/security.md)",
                        open_nodes=open_nodes, root=self.root)

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
        try:
            results = tx.commit_async().get(timeout=self.session_timeout)
        finally:
            self._reads.wrote(path, created_or_deleted=True)
        if any(isinstance(r, Exception) for r in results):
            raise ForceRetryError()

    # -- internals: the restore after a (re)connection ----------------------------------
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
                        what: str, keep_malformed: bool = False) -> Watch:
        handle = Watch(what)
        if self.connected or not self._background:
            self._retry(self.client.ensure_path, parent, self._acl(parent))
        self._add_watcher(ChildrenWatcher(self, handle, parent, self._decoder(parse), transform,
                                           callback, keep_malformed))
        return handle

