"""Where checkpointed state is kept: one namespace per task (``topology/component/index``).

Every store keeps a namespace's committed entries and txid, plus at most one prepared
change set (a txid and the changed entries, None for a deletion) that ``commit`` applies
atomically. ``load(txid)`` brings a namespace to the committed txid the checkpoint spout
restores to: a prepared change set of exactly that txid was decided, so it is rolled
forward; any other prepared set is dropped. Three kinds (``topology.state.provider``):

- ``memory``: this process's memory; for local mode and tests (survives no process).
- ``embedded``: one SQLite file per namespace under the host's state directory
  (``supervisor.state.dir``); WAL journal, fsync on every prepare. Survives workers and
  supervisors being killed and the host rebooting; not the disk, and not an executor
  moving to another host (see ``describe_load``).
- ``redis``: a Redis server (``topology.state.redis.url``); changes are applied by a Lua
  script, atomically. Survives what the server's own persistence survives.
"""
from __future__ import annotations

import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from squall.errors import SquallError
from squall.extras import needs

Changes = Mapping[bytes, "bytes | None"]

MEMORY, EMBEDDED, REDIS = "memory", "embedded", "redis"


class StoreError(SquallError, RuntimeError):
    """A store that cannot be opened, read or written; the message says which and why."""


class NoStoredState(StoreError):
    """A read-only open found no state at all: the task never checkpointed here."""


class Store(Protocol):
    def load(self, txid: int) -> tuple[int | None, dict[bytes, bytes]]:
        """Settle the namespace at committed ``txid``; (txid it held, committed entries)."""

    def read(self, txid: int) -> tuple[int | None, dict[bytes, bytes]]:
        """What ``load`` would return, without writing anything."""

    def prepare(self, txid: int, changes: Changes) -> None: ...

    def commit(self, txid: int) -> None: ...

    def close(self) -> None: ...


def settle(committed: int | None, prepared: int | None, txid: int) -> str | None:
    """What ``load(txid)`` does to a prepared change set: "commit", "drop" or None."""
    if prepared is None:
        return None
    return "commit" if prepared == txid else "drop"


def describe_load(namespace: str, held: int | None, txid: int) -> str | None:
    """The problem with a namespace that held committed txid ``held`` when the topology
    restores to ``txid``, or None. Nothing stored at all is a new (or moved) task."""
    if held is None or held == txid:
        return None
    if held < txid:
        return (f"state {namespace} holds txid {held}, but the topology restores to txid {txid}: "
                f"the changes of txids {held + 1}..{txid} are missing (was this task's state kept "
                "by another host? the embedded store is per host: use Redis to move tasks freely)")
    return (f"state {namespace} holds txid {held}, newer than the topology's committed txid {txid} "
            "(the checkpoint spout's own record was lost?); continuing from what is stored")


def _overlay(entries: dict[bytes, bytes], changes: Mapping[bytes, bytes | None]) -> dict[bytes, bytes]:
    for k, v in changes.items():
        if v is None:
            entries.pop(k, None)
        else:
            entries[k] = v
    return entries


# -- memory -------------------------------------------------------------------------------

class _MemoryNamespace:
    __slots__ = ("committed", "entries", "prepared", "changes")

    def __init__(self) -> None:
        self.committed: int | None = None
        self.entries: dict[bytes, bytes] = {}
        self.prepared: int | None = None
        self.changes: dict[bytes, bytes | None] = {}


class MemoryStore:
    """A namespace in this process's memory, shared by every task of the process that
    opens it (so a local-mode test can kill and resubmit a topology and find its state)."""

    _lock = threading.Lock()
    _spaces: dict[str, _MemoryNamespace] = {}

    def __init__(self, namespace: str) -> None:
        with self._lock:
            self._ns = self._spaces.setdefault(namespace, _MemoryNamespace())

    @classmethod
    def drop(cls, prefix: str) -> None:
        """Forget every namespace under ``prefix`` (a topology name plus '/')."""
        with cls._lock:
            for name in [n for n in cls._spaces if n.startswith(prefix)]:
                del cls._spaces[name]

    def load(self, txid: int) -> tuple[int | None, dict[bytes, bytes]]:
        with self._lock:
            ns = self._ns
            what = settle(ns.committed, ns.prepared, txid)
            if what == "commit":
                _overlay(ns.entries, ns.changes)
                ns.committed = txid
            if what is not None:
                ns.prepared, ns.changes = None, {}
            return ns.committed, dict(ns.entries)

    def read(self, txid: int) -> tuple[int | None, dict[bytes, bytes]]:
        with self._lock:
            ns = self._ns
            entries = dict(ns.entries)
            if settle(ns.committed, ns.prepared, txid) == "commit":
                return txid, _overlay(entries, ns.changes)
            return ns.committed, entries

    def prepare(self, txid: int, changes: Changes) -> None:
        with self._lock:
            self._ns.prepared, self._ns.changes = txid, dict(changes)

    def commit(self, txid: int) -> None:
        with self._lock:
            ns = self._ns
            if ns.prepared != txid:
                if ns.committed == txid:
                    return
                raise StoreError(f"commit of txid {txid}, but txid {ns.prepared} is prepared")
            _overlay(ns.entries, ns.changes)
            ns.committed, ns.prepared, ns.changes = txid, None, {}

    def close(self) -> None:
        pass


# -- embedded (SQLite) --------------------------------------------------------------------

# One row per key holds both its committed value (cv) and the value prepared at txid ptx
# (pv; NULL with ptx set is a deletion). A row's prepared value counts as committed once
# the committed txid reaches ptx, so a commit is one meta update, whatever it changed; the
# next prepare of that key folds pv into cv. A prepared set that is dropped (a rollback) is
# cleared from its rows, so a later prepare that reuses its txid cannot revive it.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, cv BLOB, pv BLOB, ptx INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""
_VALUE = "CASE WHEN ptx IS NOT NULL AND ptx <= ? THEN pv ELSE cv END"
_UPSERT = ("INSERT INTO kv (k, cv, pv, ptx) VALUES (?, NULL, ?, ?) ON CONFLICT (k) DO UPDATE SET "
           "cv = CASE WHEN kv.ptx IS NOT NULL AND kv.ptx <= ? THEN kv.pv ELSE kv.cv END, "
           "pv = excluded.pv, ptx = excluded.ptx")


def embedded_path(state_dir: str | Path, namespace: str) -> Path:
    """The SQLite file of ``namespace`` (``topology/component/index``) under ``state_dir``."""
    topology, component, index = namespace.split("/")
    return Path(state_dir) / topology / f"{component}.{index}.sqlite"


class EmbeddedStore:
    """A namespace in its own SQLite file. Each store object is used by one task.

    A prepare is fsynced before it returns (the checkpoint spout decides on it); a commit
    is not: lost, it is rolled forward again by the next ``load``. The file is its owner's
    alone (0600: SQLite gives its journal files the same mode), its directory 0700."""

    def __init__(self, path: str | Path, timeout: float = 10.0, create: bool = True) -> None:
        self.path = Path(path)
        try:
            if create:
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600))
                os.chmod(self.path, 0o600)  # one an older version left 0644
            elif not self.path.exists():
                raise NoStoredState(f"no state file {self.path}")
            uri = self.path.absolute().as_uri() + ("" if create else "?mode=ro")
            self._db = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None,
                                       check_same_thread=False)
            if create:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open state file {self.path}: {exc}") from None

    def _meta(self) -> tuple[int | None, int | None]:
        rows = dict(self._db.execute("SELECT name, value FROM meta").fetchall())
        return rows.get("committed"), rows.get("prepared")

    def _run(self, what: str, fn: Any) -> Any:
        try:
            return fn()
        except sqlite3.Error as exc:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise StoreError(f"state file {self.path}: {what} failed: {exc}") from None

    def _entries(self, committed: int | None) -> dict[bytes, bytes]:
        rows = self._db.execute(f"SELECT k, {_VALUE} FROM kv", (-1 if committed is None else committed,))
        return {k: v for k, v in rows if v is not None}

    def load(self, txid: int) -> tuple[int | None, dict[bytes, bytes]]:
        def run() -> tuple[int | None, dict[bytes, bytes]]:
            db = self._db
            db.execute("PRAGMA synchronous=FULL")
            db.execute("BEGIN IMMEDIATE")
            committed, prepared = self._meta()
            what = settle(committed, prepared, txid)
            if what == "commit":
                committed = txid
                db.execute("INSERT OR REPLACE INTO meta VALUES ('committed', ?)", (txid,))
            elif what == "drop":
                db.execute("UPDATE kv SET pv = NULL, ptx = NULL WHERE ptx > ?",
                           (-1 if committed is None else committed,))
            if what is not None:
                db.execute("DELETE FROM meta WHERE name = 'prepared'")
            entries = self._entries(committed)
            db.execute("COMMIT")
            return committed, entries
        return self._run("load", run)

    def read(self, txid: int) -> tuple[int | None, dict[bytes, bytes]]:
        def run() -> tuple[int | None, dict[bytes, bytes]]:
            db = self._db
            db.execute("BEGIN")
            if db.execute("SELECT count(*) FROM sqlite_master WHERE name IN ('kv', 'meta')").fetchone()[0] < 2:
                db.execute("COMMIT")
                return None, {}  # a file still being created
            committed, prepared = self._meta()
            if settle(committed, prepared, txid) == "commit":
                committed = txid
            entries = self._entries(committed)
            db.execute("COMMIT")
            return committed, entries
        return self._run("read", run)

    def prepare(self, txid: int, changes: Changes) -> None:
        def run() -> None:
            db = self._db
            db.execute("PRAGMA synchronous=FULL")
            db.execute("BEGIN IMMEDIATE")
            committed, prepared = self._meta()
            if prepared is not None and prepared != committed:  # an earlier set never committed
                db.execute("UPDATE kv SET pv = NULL, ptx = NULL WHERE ptx > ?",
                           (-1 if committed is None else committed,))
            c = -1 if committed is None else committed
            db.executemany(_UPSERT, ((k, v, txid, c) for k, v in changes.items()))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('prepared', ?)", (txid,))
            db.execute("COMMIT")
        self._run("prepare", run)

    def commit(self, txid: int) -> None:
        def run() -> None:
            db = self._db
            db.execute("PRAGMA synchronous=NORMAL")  # not fsynced: load rolls a lost one forward
            db.execute("BEGIN IMMEDIATE")
            committed, prepared = self._meta()
            if prepared != txid:
                db.execute("ROLLBACK")
                if committed == txid:
                    return
                raise StoreError(f"state file {self.path}: commit of txid {txid}, but txid "
                                 f"{prepared} is prepared")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('committed', ?)", (txid,))
            db.execute("COMMIT")
        self._run("commit", run)

    def close(self) -> None:
        try:
            self._db.close()
        except sqlite3.Error:
            pass


# -- Redis --------------------------------------------------------------------------------

# Applies a prepared change set atomically (a script runs alone on the server).
# KEYS: meta, pending, kv, deleted. ARGV: txid. Returns 1 when txid is (now) committed.
_COMMIT_SCRIPT = """
local p = redis.call('HGET', KEYS[1], 'prepared')
if p ~= ARGV[1] then
  if redis.call('HGET', KEYS[1], 'committed') == ARGV[1] then return 1 end
  return 0
end
local cursor = '0'
repeat
  local r = redis.call('HSCAN', KEYS[2], cursor, 'COUNT', 1000)
  cursor = r[1]
  local kv = r[2]
  for i = 1, #kv, 2 do redis.call('HSET', KEYS[3], kv[i], kv[i + 1]) end
until cursor == '0'
local dels = redis.call('SMEMBERS', KEYS[4])
for i = 1, #dels do redis.call('HDEL', KEYS[3], dels[i]) end
redis.call('DEL', KEYS[2], KEYS[4])
redis.call('HSET', KEYS[1], 'committed', ARGV[1])
redis.call('HDEL', KEYS[1], 'prepared')
return 1
"""

_clients: dict[tuple[str, float], Any] = {}
_clients_lock = threading.Lock()
BATCH = 1000  # entries per command when writing a change set


def redis_client(url: str, timeout: float) -> Any:
    """One client (and connection pool) per URL in a process; redis-py's client is thread-safe."""
    try:
        import redis
    except ImportError:
        raise StoreError(needs("topology.state.provider redis", "the redis package", "redis")) from None
    with _clients_lock:
        client = _clients.get((url, timeout))
        if client is None:
            try:
                client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
            except ValueError as exc:
                raise StoreError(f"bad topology.state.redis.url {url!r}: {exc}") from None
            _clients[(url, timeout)] = client
        return client


class RedisStore:
    """A namespace as Redis keys ``squall:state:{namespace}:...`` (the braces keep them in
    one hash slot, so a Redis Cluster can run the commit script)."""

    def __init__(self, client: Any, namespace: str) -> None:
        self._r = client
        base = f"squall:state:{{{namespace}}}"
        self.meta, self.pending, self.kv, self.deleted = (f"{base}:meta", f"{base}:pending",
                                                          f"{base}:kv", f"{base}:deleted")
        self._commit = client.register_script(_COMMIT_SCRIPT)

    def _run(self, what: str, fn: Any) -> Any:
        import redis

        try:
            return fn()
        except redis.RedisError as exc:
            raise StoreError(f"redis state {self.kv}: {what} failed: {exc}") from None

    def _txids(self) -> tuple[int | None, int | None]:
        raw = self._r.hmget(self.meta, "committed", "prepared")
        out = []
        for v in raw:
            try:
                out.append(None if v is None else int(v))
            except ValueError:
                raise StoreError(f"redis state {self.meta}: bad txid {v!r:.40}") from None
        return out[0], out[1]

    def _entries(self) -> dict[bytes, bytes]:
        return dict(self._r.hscan_iter(self.kv, count=BATCH))

    def load(self, txid: int) -> tuple[int | None, dict[bytes, bytes]]:
        def run() -> tuple[int | None, dict[bytes, bytes]]:
            committed, prepared = self._txids()
            what = settle(committed, prepared, txid)
            if what == "commit":
                if self._commit(keys=[self.meta, self.pending, self.kv, self.deleted], args=[txid]):
                    committed = txid
            elif what == "drop":
                pipe = self._r.pipeline(transaction=True)
                pipe.delete(self.pending, self.deleted)
                pipe.hdel(self.meta, "prepared")
                pipe.execute()
            return committed, self._entries()
        return self._run("load", run)

    def read(self, txid: int) -> tuple[int | None, dict[bytes, bytes]]:
        def run() -> tuple[int | None, dict[bytes, bytes]]:
            committed, prepared = self._txids()
            entries = self._entries()
            if settle(committed, prepared, txid) == "commit":
                changes: dict[bytes, bytes | None] = dict(self._r.hscan_iter(self.pending, count=BATCH))
                changes.update((k, None) for k in self._r.smembers(self.deleted))
                return txid, _overlay(entries, changes)
            return committed, entries
        return self._run("read", run)

    def prepare(self, txid: int, changes: Changes) -> None:
        def run() -> None:
            pipe = self._r.pipeline(transaction=True)
            pipe.delete(self.pending, self.deleted)
            puts = [(k, v) for k, v in changes.items() if v is not None]
            dels = [k for k, v in changes.items() if v is None]
            for i in range(0, len(puts), BATCH):
                pipe.hset(self.pending, mapping=dict(puts[i:i + BATCH]))
            for i in range(0, len(dels), BATCH):
                pipe.sadd(self.deleted, *dels[i:i + BATCH])
            pipe.hset(self.meta, "prepared", txid)
            pipe.execute()
        self._run("prepare", run)

    def commit(self, txid: int) -> None:
        def run() -> None:
            if not self._commit(keys=[self.meta, self.pending, self.kv, self.deleted], args=[txid]):
                raise StoreError(f"redis state {self.kv}: commit of txid {txid}, which is not prepared")
        self._run("commit", run)

    def close(self) -> None:
        pass  # the client and its pool are shared by the process


# -- choosing one -------------------------------------------------------------------------

def provider(conf: Mapping[str, Any]) -> str:
    """The configured provider; null means memory in local mode, embedded on a cluster."""
    chosen = conf.get("topology.state.provider")
    if chosen:
        return str(chosen)
    return MEMORY if conf.get("squall.messaging.transport") == "local" else EMBEDDED


def state_dir(conf: Mapping[str, Any]) -> Path:
    """The host's directory of embedded state files."""
    configured = conf.get("supervisor.state.dir")
    base = Path(str(configured)) if configured else Path(str(conf["squall.local.dir"])) / "state"
    return base.expanduser().absolute()


NAMESPACE_KEY = "topology.state.namespace"


def state_name(conf: Mapping[str, Any]) -> str:
    """The name a topology's state goes by: ``topology.state.namespace``, which nimbus sets at
    submit (a topology instance's own, or its owner's earlier one when asked to carry it
    over), else the topology's name (local mode, where one user runs everything)."""
    return str(conf.get(NAMESPACE_KEY) or conf["topology.name"])


def namespace(topology: str, component: str, index: int) -> str:
    """``topology/component/index``, each part %-quoted (safe in file names and keys)."""
    return f"{_part(topology)}/{_part(component)}/{int(index)}"


def _part(name: str) -> str:
    q = urllib.parse.quote(name, safe="")
    return "%2E" + q[1:] if q.startswith(".") else q  # never "." or ".." as a path part


def open_store(conf: Mapping[str, Any], ns: str, create: bool = True) -> Store:
    """The store of namespace ``ns`` as ``conf`` configures it (``create=False``: read an
    existing one only)."""
    kind = provider(conf)
    if kind == MEMORY:
        return MemoryStore(ns)
    if kind == EMBEDDED:
        return EmbeddedStore(embedded_path(state_dir(conf), ns), create=create)
    if kind == REDIS:
        timeout = float(conf.get("topology.state.redis.timeout.secs") or 5.0)
        return RedisStore(redis_client(str(conf["topology.state.redis.url"]), timeout), ns)
    raise StoreError(f"unknown topology.state.provider {kind!r} (memory, embedded or redis)")
