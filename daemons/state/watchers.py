"""Watchers: one-shot ZooKeeper watches re-armed after every event, reporting real changes.

A watcher reads through the small ``WatchSupport`` interface of the facade that owns it
(its kazoo client, whether it is closed, its request timeout, and a way to ask for a
resync after a failed read). The facade re-synchronises every active watcher after a
reconnect or a session expiry. Callbacks run on kazoo's event thread or on the facade's
restore thread: keep them short.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, WatchedEvent

log = structlog.get_logger("squall.state.watchers")


class WatchSupport(Protocol):
    """What a watcher needs from the facade that owns it."""

    session_timeout: float  # seconds one read may wait

    @property
    def client(self) -> KazooClient: ...

    @property
    def closed(self) -> bool: ...

    def request_resync(self) -> None:
        """Resync every watcher soon (on the restore thread): a read failed."""


class Watch:
    """Handle returned by the ``watch_*`` methods; ``cancel()`` stops further callbacks."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    @property
    def cancelled(self) -> bool:
        return self._cancelled


_UNSET: Any = object()


def _call(owner: WatchSupport, request: Callable[..., Any], path: str,
          watch: Callable[[WatchedEvent], None]) -> Any:
    """One watched read that waits at most the session timeout (kazoo's synchronous calls
    wait without a bound while it reconnects); KazooTimeoutError past it."""
    return request(path, watch=watch).get(timeout=owner.session_timeout)


class Watcher:
    """Common part of the watchers: emission only on change, in order, errors logged."""

    def __init__(self, owner: WatchSupport, handle: Watch, callback: Callable[[Any], None]) -> None:
        self._owner = owner
        self._handle = handle
        self._callback = callback
        self._mutex = threading.RLock()  # serializes reads of ZooKeeper and the cached values
        self._emit_lock = threading.Lock()  # callbacks in order, never two at once
        self._last: Any = _UNSET

    @property
    def active(self) -> bool:
        return not self._handle.cancelled and not self._owner.closed

    def _deliver(self, value: Any) -> None:
        # Caller holds _emit_lock.
        if value == self._last or not self.active:
            return
        self._last = value
        try:
            self._callback(value)
        except Exception:  # noqa: BLE001 - a broken callback must not kill the watch
            log.exception("watch callback raised", watch=self._handle.what)

    def _on_event(self, event: WatchedEvent) -> None:
        # NONE events announce connection state; the restore thread resyncs on reconnect.
        if event.type == EventType.NONE or not self.active:
            return
        try:
            self.refresh()
        except (KazooException, KazooTimeoutError) as exc:
            log.info("watch refresh failed, resync requested", watch=self._handle.what, error=repr(exc))
            self._owner.request_resync()

    def refresh(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def resync(self) -> None:
        self.refresh()


class NodeWatcher(Watcher):
    """One node's decoded value (None when absent or malformed)."""

    def __init__(self, owner: WatchSupport, handle: Watch, path: str,
                 decode: Callable[[str, bytes], Any], callback: Callable[[Any], None]) -> None:
        super().__init__(owner, handle, callback)
        self._path = path
        self._decode = decode

    def refresh(self) -> None:
        client = self._owner.client
        with self._emit_lock:
            with self._mutex:
                while True:
                    try:
                        data, _ = _call(self._owner, client.get_async, self._path, self._on_event)
                        value = self._decode(self._path, data)
                        break
                    except NoNodeError:
                        # exists() leaves a watch that fires on creation; if the node came
                        # back in between, read it again.
                        if _call(self._owner, client.exists_async, self._path, self._on_event) is None:
                            value = None
                            break
            self._deliver(value)


class ChildrenWatcher(Watcher):
    """A parent's children with their decoded data, delivered once every child is loaded.
    A malformed child is left out, or delivered as None with ``keep_malformed``."""

    def __init__(self, owner: WatchSupport, handle: Watch, parent: str,
                 decode: Callable[[str, bytes], Any], transform: Callable[[dict[str, Any]], Any],
                 callback: Callable[[Any], None], keep_malformed: bool = False) -> None:
        super().__init__(owner, handle, callback)
        self._parent = parent
        self._keep_malformed = keep_malformed
        self._decode = decode
        self._transform = transform
        self._children: set[str] = set()
        self._values: dict[str, Any] = {}  # child -> decoded value, None when malformed
        self._child_watchers: dict[str, Callable[[WatchedEvent], None]] = {}

    def _watcher_for(self, child: str) -> Callable[[WatchedEvent], None]:
        # One stable function per child: kazoo keeps watchers in a set, so re-arming the
        # same path with the same function never doubles the callbacks.
        fn = self._child_watchers.get(child)
        if fn is None:
            def fn(event: WatchedEvent, child: str = child) -> None:
                if event.type == EventType.NONE or not self.active:
                    return
                try:
                    self._refresh_child(child)
                except (KazooException, KazooTimeoutError) as exc:
                    log.info("watch refresh failed, resync requested", watch=self._handle.what,
                             error=repr(exc))
                    self._owner.request_resync()
            self._child_watchers[child] = fn
        return fn

    def _load(self, children: Iterable[str]) -> None:
        # Caller holds _mutex. Reads in parallel; a child deleted meanwhile is simply absent.
        client = self._owner.client
        pending = [(c, client.get_async(f"{self._parent}/{c}", watch=self._watcher_for(c)))
                   for c in children]
        for child, result in pending:
            path = f"{self._parent}/{child}"
            try:
                data, _ = result.get(timeout=self._owner.session_timeout)
            except NoNodeError:
                self._values.pop(child, None)
                continue
            self._values[child] = self._decode(path, data)

    def _list(self) -> set[str]:
        client = self._owner.client
        try:
            return set(_call(self._owner, client.get_children_async, self._parent, self._on_event))
        except NoNodeError:
            if _call(self._owner, client.exists_async, self._parent, self._on_event) is not None:
                return self._list()
            return set()

    def refresh(self) -> None:
        with self._emit_lock:
            with self._mutex:
                current = self._list()
                self._load(current - self._values.keys())
                self._forget(self._values.keys() - current)
                self._children = current
            self._emit()

    def resync(self) -> None:
        with self._emit_lock:
            with self._mutex:
                current = self._list()
                self._values.clear()
                self._load(current)
                self._forget(set(self._child_watchers) - current)
                self._children = current
            self._emit()

    def _refresh_child(self, child: str) -> None:
        with self._emit_lock:
            with self._mutex:
                if child not in self._children:
                    return  # gone from the listing: the children watch has dealt with it
                self._load([child])
            self._emit()

    def _forget(self, children: Iterable[str]) -> None:
        for child in list(children):
            self._values.pop(child, None)
            self._child_watchers.pop(child, None)

    def _emit(self) -> None:
        # Caller holds _emit_lock. A listed child whose data is not read yet (deleted while
        # listed, its removal event still to come) holds back delivery: no partial views.
        with self._mutex:
            if self._children - self._values.keys():
                return
            loaded = {c: self._values[c] for c in sorted(self._children)
                      if self._keep_malformed or self._values[c] is not None}
        self._deliver(self._transform(loaded))
