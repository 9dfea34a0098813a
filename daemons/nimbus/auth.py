"""Who may call nimbus's API: bearer tokens mapped to a user and a role, and the decision.

The token file (``nimbus.auth.tokens.file``, YAML or JSON) holds sha256 hashes, never the
tokens themselves, so reading it does not give anyone a token::

    tokens:
      - {user: alice, role: admin, sha256: 9f86d08...}
      - {user: supervisors, role: supervisor, sha256: 60303ae...}

``squall token add`` appends an entry and prints the new token once; nimbus notices the
change within seconds (``TokenFile``). A presented token is
hashed and compared with every entry by ``hmac.compare_digest`` (no early exit), so timing
tells nothing about which entry came close.

``authorize(role, user, action, owner)`` is the whole policy, a plain function (``decide``
turns it into the status a request gets: a ``user`` asking about a topology it may not see
gets the 404 of a missing one, never a 403 that would confirm the name):

- ``admin``: everything;
- ``user``: submit; read, control and fetch the code of its own topologies (lists show
  only those); read the cluster;
- ``viewer``: read everything (not code bundles: they carry the topology's conf);
- ``supervisor``: fetch code bundles (supervisors and a standby nimbus's code sync), report
  (a supervisor's heartbeat with its workers' beats and stats), and read worker logs from a
  supervisor's logviewer (nimbus proxies ``squall logs`` there after authorizing its own
  caller).

Supervisors check tokens against the table the leading nimbus publishes in ZooKeeper
(``published_tokens`` / ``PublishedTokenSource``), so one token file serves the cluster.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog
import yaml

from squall.daemons.file_watch import RELOAD_CHECK_SECS, FileWatch
from squall.daemons.state.records import PublishedTokens
from squall.daemons.timers import SYSTEM_CLOCK, Clock
from squall.errors import SquallError

log = structlog.get_logger("squall.nimbus.auth")

ROLES = ("admin", "user", "viewer", "supervisor")
READ, SUBMIT, CONTROL, FETCH_CODE, READ_LOGS = "read", "submit", "control", "fetch-code", "read-logs"
REPORT = "report"
ACTIONS = (READ, SUBMIT, CONTROL, FETCH_CODE, READ_LOGS, REPORT)
MAX_TOKENS = 10_000
MAX_FILE_BYTES = 4 << 20
MIN_TOKEN_CHARS = 16


class TokenFileError(SquallError, ValueError):
    """The token file cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class Principal:
    """Who a request comes from."""

    user: str
    role: str


# Requests on a cluster whose API security is off act as this principal.
ANONYMOUS_ADMIN = Principal("anonymous", "admin")


def authorize(role: str, user: str, action: str, owner: str | None) -> bool:
    """May ``user`` with ``role`` do ``action`` on a topology owned by ``owner``?

    ``owner`` is None for actions that name no topology (a list, the cluster view, submit).
    Unknown roles and actions are refused.
    """
    if action not in ACTIONS:
        return False
    if role == "admin":
        return True
    if role == "supervisor":
        return action in (FETCH_CODE, READ_LOGS, REPORT)
    if action == REPORT:  # what only supervisors send
        return False
    if action == READ_LOGS:  # for everyone else a log is read like the topology itself
        if role == "user":  # ... which a user must own (None: no such topology)
            return bool(owner) and owner == user
        action = READ
    if role == "viewer":
        return action == READ
    if role == "user":
        if action == SUBMIT:
            return True
        if action == READ and owner is None:
            return True
        return bool(owner) and owner == user  # "" (a record from before owners) is nobody's
    return False


def may_see(role: str, user: str, owner: str | None) -> bool:
    """May ``user`` with ``role`` learn that a topology owned by ``owner`` exists? A ``user``
    sees only its own; ``admin`` and ``viewer`` see every topology, and so does ``supervisor``
    (it fetches every topology's code)."""
    if role in ("admin", "viewer", "supervisor"):
        return True
    return role == "user" and bool(owner) and owner == user


def decide(role: str, user: str, action: str, owner: str | None) -> int:
    """The status a request gets from the policy: 200 when ``authorize`` allows it; 404 when
    it names a topology (``owner`` not None) the principal may not see, so that it is refused
    exactly as a topology that does not exist; 403 otherwise."""
    if authorize(role, user, action, owner):
        return 200
    if owner is not None and not may_see(role, user, owner):
        return 404
    return 403


def topology_filter(principal: Principal, owner_of: Callable[[str], str | None]) -> Callable[[str], bool]:
    """Which topologies' series a caller of a supervisor's ``/metrics`` is shown, by topology
    id: all for roles that read every topology (``admin``, ``viewer``); for a ``user``, those
    it owns (a topology whose owner cannot be found is shown to no user). Owners are looked
    up once per topology."""
    if principal.role in ("admin", "viewer"):
        return lambda _topology_id: True
    seen: dict[str, bool] = {}

    def visible(topology_id: str) -> bool:
        if topology_id not in seen:
            owner = owner_of(topology_id)
            seen[topology_id] = owner is not None and authorize(principal.role, principal.user, READ, owner)
        return seen[topology_id]
    return visible


def token_hash(token: str) -> str:
    """The sha256 hex a token file keeps for ``token``."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


class TokenTable:
    """The entries of a token file; ``lookup`` maps a presented token to its principal."""

    def __init__(self, entries: list[tuple[str, Principal]]) -> None:
        self._entries = [(bytes.fromhex(h), p) for h, p in entries]

    def __len__(self) -> int:
        return len(self._entries)

    def published(self) -> tuple[tuple[str, str, str], ...]:
        """(sha256 hex, user, role) of every entry, as nimbus publishes them."""
        return tuple((stored.hex(), p.user, p.role) for stored, p in self._entries)

    def lookup(self, token: str) -> Principal | None:
        presented = hashlib.sha256(token.encode("utf-8", "replace")).digest()
        found = None
        for stored, principal in self._entries:  # every entry, so the time does not depend on which
            if hmac.compare_digest(stored, presented):
                found = principal
        return found

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TokenTable:
        """Read and check a token file; TokenFileError naming the problem."""
        path = Path(path)
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                raise TokenFileError(f"token file {path} is larger than {MAX_FILE_BYTES} bytes")
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TokenFileError(f"cannot read token file {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise TokenFileError(f"token file {path} is not UTF-8 text") from None
        try:
            doc = yaml.safe_load(text)  # JSON is YAML too
        except yaml.YAMLError as exc:
            raise TokenFileError(f"token file {path} is not valid YAML or JSON: {exc}") from None
        return cls(parse_entries(doc, str(path)))


class TokenSource(Protocol):
    """Where a guard finds the tokens in force; None: API authentication is off."""

    def table(self) -> TokenTable | None: ...

    def recheck(self) -> TokenTable | None:
        """The table again after a token was not found in it: a source that can see a newer
        table now (a token file just changed) reads it."""


class TokenFile:
    """A token file in force: read at start and again when it changes (checked at most every
    ``RELOAD_CHECK_SECS``, read once the change has settled), so adding or revoking a token
    needs no restart. A change that cannot be used is logged and the tokens read before stay
    in force."""

    def __init__(self, path: str | os.PathLike[str], clock: Clock = SYSTEM_CLOCK) -> None:
        self.path = Path(path)
        self._watch = FileWatch([self.path], RELOAD_CHECK_SECS, clock)
        self._table = TokenTable.load(self.path)
        self._lock = threading.Lock()

    def table(self) -> TokenTable:
        with self._lock:
            if self._watch.changed():
                self._reload()
            return self._table

    def recheck(self) -> TokenTable:
        """A token was unknown: read the file at once if it changed (``squall token add``
        replaces it by a rename), so a new token works on its first request."""
        with self._lock:
            if self._watch.changed_now():
                self._reload()
            return self._table

    def _reload(self) -> None:
        try:
            self._table = TokenTable.load(self.path)
            log.info("API tokens reloaded", file=str(self.path), tokens=len(self._table))
        except TokenFileError as exc:
            log.error("token file changed but cannot be used; the tokens read before stay "
                      "in force", error=str(exc))


def published_tokens(source: TokenSource | None) -> PublishedTokens:
    """What nimbus publishes for the supervisors: the tokens in force, or "off"."""
    table = source.table() if source is not None else None
    if table is None:
        return PublishedTokens(False)
    return PublishedTokens(True, table.published())


class PublishedTokenSource:
    """The token table a supervisor applies: the one the leading nimbus last published.

    Until one arrives no token is accepted. A node that disappears or cannot be read leaves
    the last good table in force: bad data must never open the door."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: TokenTable | None = TokenTable([])
        self.received = False

    def update(self, tokens: PublishedTokens | None) -> str | None:
        """Apply a published table. Returns what happened, for the log: "on" (a table is in
        force), "off" (authentication turned off), "kept" (nothing usable; the last table
        stays), or None (nothing yet)."""
        with self._lock:
            if tokens is None:
                return "kept" if self.received else None
            self.received = True
            if not tokens.enabled:
                self._table = None
                return "off"
            self._table = TokenTable([(h, Principal(user, role)) for h, user, role in tokens.entries])
            return "on"

    def table(self) -> TokenTable | None:
        with self._lock:
            return self._table

    def recheck(self) -> TokenTable | None:
        return self.table()  # updates arrive by update(); nothing to read here


def parse_entries(doc: Any, where: str) -> list[tuple[str, Principal]]:
    """Check a token file's document; (sha256 hex, principal) per entry."""
    if not isinstance(doc, dict) or not isinstance(doc.get("tokens"), list):
        raise TokenFileError(f"token file {where} must hold a mapping with a 'tokens' list")
    rows = doc["tokens"]
    if len(rows) > MAX_TOKENS:
        raise TokenFileError(f"token file {where} has more than {MAX_TOKENS} tokens")
    out: list[tuple[str, Principal]] = []
    seen: set[str] = set()
    for i, row in enumerate(rows, start=1):
        what = f"token file {where}, entry {i}"
        if not isinstance(row, dict) or set(row) - {"user", "role", "sha256"}:
            raise TokenFileError(f"{what}: must be a mapping of user, role and sha256")
        user, role, digest = row.get("user"), row.get("role"), row.get("sha256")
        if not isinstance(user, str) or not user or len(user) > 200:
            raise TokenFileError(f"{what}: user must be a non-empty string")
        if role not in ROLES:
            raise TokenFileError(f"{what}: role must be one of {', '.join(ROLES)}, got {role!r}")
        if (not isinstance(digest, str) or len(digest) != 64
                or any(c not in "0123456789abcdef" for c in digest.lower())):
            raise TokenFileError(f"{what}: sha256 must be 64 hex digits (the hash of the token, "
                                 "never the token itself)")
        digest = digest.lower()
        if digest in seen:
            raise TokenFileError(f"{what}: the same token hash appears twice")
        seen.add(digest)
        out.append((digest, Principal(user, role)))
    return out


def add_token(path: str | os.PathLike[str], user: str, role: str, token: str | None = None) -> str:
    """Append an entry for ``user``/``role`` to the token file (created 0600 if missing);
    returns the token, which is stored nowhere else."""
    if role not in ROLES:
        raise TokenFileError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    token = token or new_token()
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenFileError(f"a token must have at least {MIN_TOKEN_CHARS} characters")
    path = Path(path)
    doc: dict[str, Any] = {"tokens": []}
    if path.exists():
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {"tokens": []}
        except (OSError, yaml.YAMLError) as exc:
            raise TokenFileError(f"cannot read token file {path}: {exc}") from None
        parse_entries(doc, str(path))
    doc["tokens"].append({"user": user, "role": role, "sha256": token_hash(token)})
    parse_entries(doc, str(path))
    write_private(path, json.dumps(doc, indent=1) + "\n" if path.suffix == ".json"
                  else yaml.safe_dump(doc, sort_keys=False))
    return token


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (atomically, via a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
