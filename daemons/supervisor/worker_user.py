"""Who workers run as: ``supervisor.worker.user`` and ``supervisor.worker.uids``; plain decisions.

User code runs in workers, and nothing the daemons hold may be within its reach. The modes
(``WorkerAccounts.from_conf``):

- ``isolated``: the default of a supervisor running as root. Each topology's workers on this
  host get a user id of their own from ``supervisor.worker.uids`` (first, count), with the
  group of the same number and no other groups, and no account in /etc/passwd (systemd's
  DynamicUser does the same): they cannot read the daemons' files, nor another topology's
  files, nor look into its processes.
- ``named``: ``supervisor.worker.user: NAME``, an unprivileged account every worker runs as
  (Storm's ``supervisor.run.worker.as.user``): apart from the daemons, not from each other.
- ``root``: ``supervisor.worker.user: root`` runs workers as root: SECURITY OFF, said at start.
- ``own``: a supervisor that is not root cannot switch users; its workers run as its own
  user and can read its token and password: SECURITY OFF, said at start.

``pick_uid`` chooses a topology's id: the same one for every worker of the topology on this
host, stable across relaunches and resubmissions under the same name (a hash of the name,
then the next free one), never an id that has an account or is another topology's.
"""
from __future__ import annotations

import os
import pwd
import zlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from squall.errors import SquallError

ISOLATED, NAMED, ROOT, OWN = "isolated", "named", "root", "own"
ROOT_USER = "root"


class WorkerUserError(SquallError, ValueError):
    """The configured worker user cannot be used; the message says why."""


@dataclass(frozen=True)
class WorkerIdentity:
    """A uid and gid a worker runs as (no supplementary groups); ``name`` for USER and LOGNAME."""

    uid: int
    gid: int
    name: str
    home: str | None = None  # None: the worker's own directory

    def environ(self, env: Mapping[str, str], home: str) -> dict[str, str]:
        return {**env, "HOME": self.home or home, "USER": self.name, "LOGNAME": self.name}


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def pick_uid(name: str, first: int, count: int, taken: Collection[int],
             has_account: Callable[[int], bool] = _has_account) -> int:
    """The user id of topology ``name``'s workers: from the name's hash onwards, the first
    id in ``[first, first + count)`` that no other topology here uses and no account owns.
    WorkerUserError when every id is taken."""
    start = zlib.crc32(name.encode()) % count
    for i in range(count):
        uid = first + (start + i) % count
        if uid not in taken and not has_account(uid):
            return uid
    raise WorkerUserError(f"every user id of supervisor.worker.uids ({first}, {count}) is in use")


@dataclass(frozen=True)
class WorkerAccounts:
    """The mode workers run in on this host (see the module doc)."""

    mode: str
    named: WorkerIdentity | None = None
    first_uid: int = 0
    uid_count: int = 0

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], euid: int | None = None,
                  lookup: Callable[[str], Any] = pwd.getpwnam) -> WorkerAccounts:
        euid = os.geteuid() if euid is None else euid
        name = conf.get("supervisor.worker.user")
        first, count = uid_range(conf.get("supervisor.worker.uids"))
        if not name:
            return cls(ISOLATED, first_uid=first, uid_count=count) if euid == 0 else cls(OWN)
        try:
            entry = lookup(name)
        except KeyError:
            raise WorkerUserError(f"supervisor.worker.user {name!r} is not a user on this host") from None
        if entry.pw_uid == 0:
            if name != ROOT_USER:
                raise WorkerUserError(f"supervisor.worker.user {name!r} has uid 0: write 'root' to run "
                                      "workers as root (SECURITY OFF), or name an unprivileged user")
            return cls(ROOT)
        if euid != 0:
            raise WorkerUserError(f"supervisor.worker.user {name!r} needs the supervisor to run as root "
                                  "(it switches user when it starts a worker)")
        return cls(NAMED, named=WorkerIdentity(entry.pw_uid, entry.pw_gid, name, entry.pw_dir))

    @property
    def switches(self) -> bool:
        """Whether workers run as another user than the supervisor."""
        return self.mode in (ISOLATED, NAMED)

    def warnings(self) -> list[str]:
        """What is open in this mode, one sentence each (logged at start)."""
        if self.mode == ROOT:
            return ["SECURITY OFF: workers run as root (supervisor.worker.user: root): user code can read "
                    "every secret on this host, the daemons' tokens and ZooKeeper password included"]
        if self.mode == OWN:
            return ["SECURITY OFF: the supervisor does not run as root, so workers run as its own user: user "
                    "code can read the supervisor's token, ZooKeeper password and files (run the supervisor "
                    "as root: workers then run as users of their own)"]
        if self.mode == NAMED:
            return [f"workers of every topology run as {self.named.name!r} (supervisor.worker.user): they are "  # type: ignore[union-attr]
                    "apart from the daemons but not from each other (unset it for a user per topology)"]
        return []

    def identity(self, topology_id: str, name: str, held: Mapping[str, int], taken: Collection[int] = (),
                 has_account: Callable[[int], bool] = _has_account) -> WorkerIdentity | None:
        """Whom a worker of topology ``topology_id`` named ``name`` runs as (None: as the
        supervisor). ``held``: topology id -> uid of the topologies with workers here (a
        topology keeps its own); ``taken``: uids that own other files here (other
        topologies' state)."""
        if self.mode == NAMED:
            return self.named
        if self.mode != ISOLATED:
            return None
        uid = held.get(topology_id)
        if uid is None:
            busy = set(held.values()) | set(taken)
            uid = pick_uid(name, self.first_uid, self.uid_count, busy, has_account)
        return WorkerIdentity(uid, uid, f"squall-{uid}")

    def describe(self) -> str:
        """Whom workers run as, in words."""
        if self.mode == ISOLATED:
            return f"a user of their own per topology (uids from {self.first_uid}, supervisor.worker.uids)"
        if self.mode == NAMED:
            return f"{self.named.name!r} (supervisor.worker.user)"  # type: ignore[union-attr]
        return "root" if self.mode == ROOT else "the supervisor's user"

    def probe_identity(self) -> WorkerIdentity | None:
        """An identity to try the worker command with at start (the first of the range)."""
        if self.mode == NAMED:
            return self.named
        if self.mode == ISOLATED:
            return WorkerIdentity(self.first_uid, self.first_uid, f"squall-{self.first_uid}")
        return None


def uid_range(value: Any) -> tuple[int, int]:
    """``supervisor.worker.uids`` checked: (first, count); WorkerUserError naming the key."""
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise WorkerUserError(f"'supervisor.worker.uids' must be [first, count], got {value!r}")
    first, count = value
    if first < 1000 or count < 1 or first + count > 2 ** 32 - 2:
        raise WorkerUserError(f"'supervisor.worker.uids' {value!r}: the ids must lie in [1000, 2^32-2)")
    return first, count
