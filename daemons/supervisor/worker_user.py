"""Workers as an unprivileged user (``supervisor.worker.user``), Storm's ``supervisor.run.worker.as.user``.

User code runs in workers; with a worker user it cannot read the supervisor's config (its
token), other local state or other hosts' material. The supervisor (root) starts each worker
with that user's uid and primary group and no other groups, and opens to that group only
what a worker needs: a way through the local dir (0710), the workers' config (0640), the
topology code (read-only, 0750/0640), and its own worker directory (owned by the user).
"""
from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class WorkerUserError(ValueError):
    """The configured worker user cannot be used; the message says why."""


@dataclass(frozen=True)
class WorkerUser:
    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> WorkerUser | None:
        name = conf.get("supervisor.worker.user")
        if not name:
            return None
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise WorkerUserError(f"supervisor.worker.user {name!r} is not a user on this host") from None
        if entry.pw_uid == 0:
            raise WorkerUserError(f"supervisor.worker.user {name!r} is root: name an unprivileged user")
        if os.geteuid() != 0:
            raise WorkerUserError(f"supervisor.worker.user {name!r} needs the supervisor to run as root "
                                  "(it switches user when it starts a worker)")
        return cls(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)

    def popen_args(self) -> dict[str, Any]:
        """``subprocess.Popen`` arguments that start the process as this user."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def environ(self, env: Mapping[str, str]) -> dict[str, str]:
        return {**env, "HOME": self.home, "USER": self.name, "LOGNAME": self.name}

    def share(self, path: Path, mode: int) -> None:
        """Give ``path`` to this user's group with ``mode`` (owner stays the supervisor)."""
        os.chown(path, -1, self.gid)
        os.chmod(path, mode)

    def share_tree(self, root: Path) -> None:
        """Topology code, read-only for the group: directories 0750, files 0640 (0750 if executable)."""
        for dirpath, _, filenames in os.walk(root):
            self.share(Path(dirpath), 0o750)
            for name in filenames:
                path = Path(dirpath, name)
                mode = os.lstat(path).st_mode
                if stat.S_ISREG(mode):
                    self.share(path, 0o750 if mode & stat.S_IXUSR else 0o640)

    def own(self, path: Path, mode: int = 0o700) -> None:
        """Hand ``path`` (a worker's own directory, its credentials file) to this user."""
        os.chown(path, self.uid, self.gid)
        os.chmod(path, mode)
