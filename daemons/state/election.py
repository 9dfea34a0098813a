"""Nimbus leader election: one contender per nimbus, on its own thread, over a kazoo Lock.

The election talks to ZooKeeper only through ``ElectionSupport``, the small interface the
facade gives it: a fresh lock on the leader path, the session generation (bumped on every
session loss), whether a node belongs to the current session, and a way to be forgotten.
The facade reports connection changes back through ``on_session_lost`` and
``on_suspended``. Contender order (who leads, who is next) is the plain function
``contender_order``.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import structlog
from kazoo.exceptions import CancelledError, KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.lock import Lock

log = structlog.get_logger("squall.state.election")

_LOCK_MARK = "__lock__"  # kazoo Lock nodes are "<uuid>__lock__<10-digit sequence>"


def contender_order(children: Iterable[str]) -> list[str]:
    """The lock nodes among ``children``, lowest sequence (the leader) first."""
    return sorted((c for c in children if _LOCK_MARK in c),
                  key=lambda name: name.rsplit(_LOCK_MARK, 1)[1])


class ElectionSupport(Protocol):
    """What an election needs from the facade that runs it."""

    @property
    def connected(self) -> bool: ...

    @property
    def session_generation(self) -> int:
        """A number that changes whenever the session is lost."""

    def leader_lock(self, identifier: str) -> Lock:
        """A new kazoo Lock on the leader path whose node data names ``identifier``."""

    def owns_node(self, path: str) -> bool:
        """True when ``path`` exists as an ephemeral node of the current session."""

    def forget_election(self, election: NimbusElection) -> None:
        """Stop reporting connection changes to ``election``."""


class NimbusElection:
    """One contender for nimbus leadership, run on its own thread (see ``elect_nimbus``)."""

    def __init__(self, support: ElectionSupport, identifier: str,
                 on_leadership: Callable[[threading.Event], None], pause: float) -> None:
        self._support = support
        self.identifier = identifier
        self._on_leadership = on_leadership
        self._pause = pause  # seconds between attempts after a failure
        self._cancelled = threading.Event()
        self._lost = threading.Event()
        self._lost.set()
        self._leading = False
        self._suspended = False
        self._lock: Any = None
        self._thread = threading.Thread(target=self._run, name=f"nimbus-election-{identifier}",
                                        daemon=True)

    def start(self) -> NimbusElection:
        """Start contending on the election thread."""
        self._thread.start()
        return self

    @property
    def is_leader(self) -> bool:
        """True while this contender holds leadership and is connected."""
        return self._leading and not self._suspended and not self._lost.is_set()

    def cancel(self, timeout: float = 10.0) -> None:
        """Step down (or stop contending) and wait for the election thread to end."""
        self._cancelled.set()
        self._lost.set()
        lock = self._lock
        if lock is not None:
            lock.cancel()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._support.forget_election(self)

    # Connection state, from the facade's listener: set flags only, never block.
    def on_session_lost(self) -> None:
        self._lost.set()

    def on_suspended(self, suspended: bool) -> None:
        self._suspended = suspended

    def _run(self) -> None:
        support = self._support
        while not self._cancelled.is_set():
            if not support.connected:
                self._cancelled.wait(0.1)
                continue
            lock = support.leader_lock(self.identifier)
            self._lock = lock
            if self._cancelled.is_set():
                break
            try:
                if not lock.acquire():
                    continue
            except CancelledError:
                break
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("nimbus election failed, retrying", nimbus=self.identifier, error=repr(exc))
                self._cancelled.wait(self._pause)
                continue
            generation = support.session_generation
            lost = threading.Event()
            self._lost = lost  # from here on, a session loss or cancel() sets it
            if (self._cancelled.is_set() or support.session_generation != generation
                    or not support.owns_node(f"{lock.path}/{lock.node}")):
                self._release(lock)  # cancelled, or won in a session that is already gone
                continue
            self._lead(lock, lost)

    def _lead(self, lock: Any, lost: threading.Event) -> None:
        self._leading = True
        log.info("nimbus leadership gained", nimbus=self.identifier)
        failed = False
        try:
            self._on_leadership(lost)
        except Exception:  # noqa: BLE001 - a failing leader steps down and contends again
            log.exception("on_leadership raised; stepping down", nimbus=self.identifier)
            failed = True
            lost.set()
        lost.wait()
        self._leading = False
        log.info("nimbus leadership ended", nimbus=self.identifier)
        self._release(lock)
        if failed:
            self._cancelled.wait(self._pause)  # let another contender take over first

    def _release(self, lock: Any) -> None:
        try:
            lock.release()
        except (KazooException, KazooTimeoutError) as exc:
            # Without a session the lock node is gone already; with one it goes with the session.
            log.info("releasing nimbus lock failed", nimbus=self.identifier, error=repr(exc))
