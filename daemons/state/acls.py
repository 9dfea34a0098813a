"""Who may do what where in ZooKeeper: digest credentials and the ACL of every node.

Plain data and plain functions, tested without a server. Two kinds of identity exist:

- the daemons' credential (``zookeeper.auth.user`` / ``zookeeper.auth.password``, the password
  else from ``$SQUALL_ZOOKEEPER_PASSWORD``), shared by nimbus and supervisors: full rights on
  every node under the root;
- one generated credential per topology (Storm's topology digest, made by nimbus at submit):
  its workers read their topology's node, whole assignment and operator requests, and read and write their
  own topology's errors (and worker beats, which only workers of an earlier squall still
  write). Nothing else: never another topology's nodes, nor the supervisors' parts of the
  assignments (``/node-assignments``), which are the daemons' alone.

Nodes are created with the ACL ``node_acl`` gives for their path; a client without
credentials gets no permission anywhere under the root. With no daemon credential
configured (security off) nodes are created open, as before.

Outside the root, ZooKeeper's own nodes (``/``, ``/zookeeper``, ``/zookeeper/quota``) and the
root's ancestors start writable by anyone: a client without credentials could fill the
server's memory there. ``outside_nodes`` lists them and ``OUTSIDE_ACL`` is what
``squall lock-zookeeper`` (and ``squall dev-cluster``) gives them: the daemons may do
anything, anyone may read.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.security import ACL, ANYONE_ID_UNSAFE, OPEN_ACL_UNSAFE, Id, Permissions, make_digest_acl_credential

from squall.config import ZOOKEEPER_PASSWORD_ENV, zookeeper_auth

# Per-topology subtrees its workers write: /<part>/<topology id>[/...] ("workerbeats": workers
# of an earlier squall, during a rolling upgrade).
WORKER_WRITABLE = ("workerbeats", "errors")
# Per-topology nodes its workers read: /<part>/<topology id>
WORKER_READABLE = ("topologies", "assignments", "operations")
# Per-topology nodes only daemons read: the topology's secrets.
DAEMON_ONLY_TOPOLOGY = ("credentials",)
TOPOLOGY_SCOPED = WORKER_WRITABLE + WORKER_READABLE + DAEMON_ONLY_TOPOLOGY

# The daemons' ZooKeeper password when ``zookeeper.auth.password`` is unset (read by the config).
PASSWORD_ENV = ZOOKEEPER_PASSWORD_ENV

# A worker creates, reads, updates and deletes its own beats and errors;
# ADMIN (changing ACLs) stays with the daemons.
WORKER_RW = Permissions.READ | Permissions.WRITE | Permissions.CREATE | Permissions.DELETE


@dataclass(frozen=True)
class Credential:
    """A ZooKeeper digest credential (user and password)."""

    user: str
    password: str

    def __post_init__(self) -> None:
        if not self.user or ":" in self.user:
            raise ValueError("a ZooKeeper digest user must be non-empty and contain no ':'")
        if not self.password:
            raise ValueError(f"the ZooKeeper digest password of {self.user!r} is empty")

    @property
    def digest_id(self) -> str:
        """The ACL identity ``user:base64(sha1(user:password))`` (no password in it)."""
        return make_digest_acl_credential(self.user, self.password)

    @property
    def auth_data(self) -> tuple[str, str]:
        """What kazoo's ``auth_data`` / ``add_auth`` take."""
        return ("digest", f"{self.user}:{self.password}")

    def __repr__(self) -> str:  # never print the password
        return f"Credential(user={self.user!r})"


def topology_user(topology_id: str) -> str:
    """The digest user of a topology's credential."""
    return f"topology-{topology_id}"


def topology_of(parts: Sequence[str]) -> str | None:
    """The topology a node belongs to (path parts relative to the root), or None."""
    if len(parts) >= 2 and parts[0] in TOPOLOGY_SCOPED:
        return parts[1]
    return None


def _digest(identity: str, perms: int) -> ACL:
    return ACL(perms, Id("digest", identity))


def node_acl(parts: Sequence[str], daemon_id: str | None, topology_id: str | None = None) -> list[ACL]:
    """The ACL of the node at ``parts`` (relative to the root).

    ``daemon_id`` is the daemons' digest identity (None: security off, the node is open);
    ``topology_id`` is the digest identity of the credential of the topology the node
    belongs to (None when unknown: daemons only).
    """
    if daemon_id is None:
        return list(OPEN_ACL_UNSAFE)
    acl = [_digest(daemon_id, Permissions.ALL)]
    if topology_id is None or topology_of(parts) is None:
        return acl
    if parts[0] in WORKER_WRITABLE:
        acl.append(_digest(topology_id, WORKER_RW))
    elif parts[0] in WORKER_READABLE and len(parts) == 2:
        acl.append(_digest(topology_id, Permissions.READ))
    return acl


# ZooKeeper's own nodes, created by the server with an open ACL.
SYSTEM_NODES = ("/zookeeper", "/zookeeper/quota")
# What lets a client change a node or create children under it.
_CHANGE = Permissions.WRITE | Permissions.CREATE | Permissions.DELETE | Permissions.ADMIN


def outside_nodes(root: str) -> list[str]:
    """Nodes outside squall's tree that must refuse writes from clients without credentials:
    ``/``, every ancestor of ``root``, and ZooKeeper's own nodes."""
    parts = [p for p in root.split("/") if p]
    ancestors = ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]
    return ["/", *ancestors, *SYSTEM_NODES]


def outside_acl(daemon_id: str) -> list[ACL]:
    """The ACL of a node outside the root: the daemons may do anything, anyone may read."""
    return [_digest(daemon_id, Permissions.ALL), ACL(Permissions.READ, ANYONE_ID_UNSAFE)]


def open_to_anyone(acl: Sequence[ACL]) -> bool:
    """Whether ``acl`` lets a client without credentials change the node or create under it."""
    return any(entry.id.scheme == "world" and entry.perms & _CHANGE for entry in acl)


def parts_of(path: str, root: str) -> tuple[str, ...]:
    """``/root/a/b`` -> ("a", "b"); the root itself -> (); outside the root -> ValueError."""
    base = "" if root == "/" else root
    if path == base or path == "/":
        return ()
    if not path.startswith(base + "/"):
        raise ValueError(f"{path!r} is not under the root {root!r}")
    return tuple(p for p in path[len(base) + 1:].split("/") if p)


@dataclass(frozen=True)
class ZkAuth:
    """How one ZooKeeper client authenticates, and whom the ACLs of its new nodes name.

    Daemons: ``credential`` is the daemons' own and ``daemon_id`` its digest identity.
    A worker: ``credential`` is its topology's, ``topology_id`` that topology, and
    ``daemon_id`` the daemons' identity (a hash, never their password), so that the nodes
    it creates stay the daemons' too. Security off: everything None.
    """

    credential: Credential | None = None
    daemon_id: str | None = None
    topology_id: str | None = None

    @property
    def enabled(self) -> bool:
        return self.daemon_id is not None

    @classmethod
    def for_daemons(cls, user: str | None, password: str | None) -> ZkAuth:
        """From ``zookeeper.auth.user`` / ``zookeeper.auth.password``; both unset: off."""
        if not user and not password:
            return cls()
        if not user or not password:
            raise ValueError("zookeeper.auth.user and zookeeper.auth.password must be set together")
        cred = Credential(user, password)
        return cls(cred, cred.digest_id)

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> ZkAuth:
        """The daemons' auth from their config (``squall.config.zookeeper_auth`` reads it).
        ValueError (a ConfigError) when only one half is there."""
        pair = zookeeper_auth(conf, environ)
        return cls() if pair is None else cls.for_daemons(*pair)

    @classmethod
    def for_worker(cls, topology_id: str, password: str, daemon_id: str | None) -> ZkAuth:
        """A worker of ``topology_id`` with its topology's password."""
        if daemon_id is None:
            return cls(topology_id=topology_id)
        return cls(Credential(topology_user(topology_id), password), daemon_id, topology_id)
