"""Topology code on a supervisor: bundles fetched from nimbus, checked and extracted."""
from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from squall.daemons.local_state import make_private
from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.supervisor import unpack
from squall.daemons.timers import SYSTEM_CLOCK, Clock
from squall.errors import SquallError

BUNDLE_MEMBERS = ("code", "topology.bin", "conf.json")  # what a usable bundle must hold
DOWNLOAD_TIMEOUT = 60.0  # socket timeout of one bundle download
CHUNK = 1 << 20


class BundleError(SquallError, RuntimeError):
    """A download that cannot be used; the message names the problem."""


class CodeDownloads:
    """Topology code under ``<local dir>/topologies/<id>/``, fetched from nimbus in the background.

    A complete bundle directory holds ``.digest`` (the sha256 it was checked against); it only
    appears by a rename, so a half-extracted bundle is never seen as present. Bundles are
    the supervisor's alone (0700); it shares one with its workers' group at their launch.
    ``root_mode``: 0711 when workers run as other users (they pass through to their code).
    """

    def __init__(self, root: Path, conf: Mapping[str, Any], logger: Any,
                 on_done: Callable[[], None], clock: Clock = SYSTEM_CLOCK,
                 root_mode: int = 0o700) -> None:
        self.clock = clock
        self.root = root
        self.conf = conf
        self.log = logger
        self.on_done = on_done
        self.failures = 0
        self.root_mode = root_mode
        self.access = ApiAccess.from_conf(conf)  # the supervisor token and the CA that signs nimbus
        self.max_unpacked = int(conf["supervisor.code.max.unpacked.bytes"])
        self.max_members = int(conf["supervisor.code.max.members"])
        self._lock = threading.Lock()
        self._in_flight: set[str] = set()  # topology ids

    def url(self, topology_id: str) -> str:
        host, port = self.conf["nimbus.host"], int(self.conf["nimbus.port"])
        quoted = urllib.parse.quote(topology_id, safe="")
        return f"{self.access.scheme}://{host}:{port}/api/v1/topologies/{quoted}/bundle"

    def present(self, topology_id: str, digest: str) -> bool:
        try:
            return (self.root / topology_id / ".digest").read_text(encoding="utf-8").strip() == digest
        except OSError:
            return False

    def in_flight(self) -> set[str]:
        with self._lock:
            return set(self._in_flight)

    def request(self, topology_id: str, digest: str) -> None:
        """Start a download unless one for this topology is running already."""
        with self._lock:
            if topology_id in self._in_flight:
                return
            self._in_flight.add(topology_id)
        threading.Thread(target=self._run, args=(topology_id, digest), daemon=True,
                         name=f"download-{topology_id}").start()

    def _run(self, topology_id: str, digest: str) -> None:
        url = self.url(topology_id)
        started = self.clock.monotonic()
        try:
            size = self.fetch(topology_id, digest, url)
            self.log.info("code downloaded", topology=topology_id, digest=digest, bytes=size,
                          secs=round(self.clock.monotonic() - started, 3))
        except BundleError as exc:
            self.failures += 1
            self.log.error("code download refused", topology=topology_id, url=url, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - a download thread must report, not vanish
            self.failures += 1
            self.log.exception("code download failed", topology=topology_id, url=url, error=repr(exc))
        finally:
            with self._lock:
                self._in_flight.discard(topology_id)
            self.on_done()

    def fetch(self, topology_id: str, digest: str, url: str) -> int:
        """Download, verify and install one bundle; BundleError saying what is wrong."""
        if not digest:
            raise BundleError("the assignment names no code digest")
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, self.root_mode)
        limit = int(self.conf["nimbus.code.max.upload.bytes"])
        work = Path(tempfile.mkdtemp(prefix=f".tmp-{topology_id}-", dir=self.root))
        try:
            archive = work / "bundle.tar.gz"
            got, size, announced = self._download(url, archive, limit, self.access)
            if got != digest:
                extra = f"; nimbus announced {announced}" if announced and announced != got else ""
                raise BundleError(f"code digest mismatch: expected {digest}, got {got} "
                                  f"({size} bytes){extra}")
            tree = work / "tree"
            try:
                with tarfile.open(archive, "r:gz") as tar:
                    self._check_members(tar)
                    unpack.extract(tar, tree)
            except unpack.UnsafeMember as exc:
                raise BundleError(f"bad code bundle: {exc}") from None
            except (tarfile.TarError, OSError, EOFError) as exc:
                raise BundleError(f"bad code bundle: {exc}") from None
            missing = [m for m in BUNDLE_MEMBERS if not (tree / m).exists()]
            if missing:
                raise BundleError(f"bad code bundle: no {', '.join(missing)}")
            (tree / ".digest").write_text(digest + "\n", encoding="utf-8")
            make_private(tree)  # extraction keeps group/other read bits: drop them
            self._install(tree, self.root / topology_id)
            return size
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _check_members(self, tar: tarfile.TarFile) -> None:
        """This supervisor's own bounds on what it unpacks (nimbus checked too, but a
        supervisor trusts no one): member count and unpacked bytes, read lazily."""
        count = total = 0
        while (member := tar.next()) is not None:
            count += 1
            total += max(0, member.size)
            if count > self.max_members:
                raise BundleError(f"bad code bundle: more than supervisor.code.max.members "
                                  f"({self.max_members}) members")
            if total > self.max_unpacked:
                raise BundleError(f"bad code bundle: unpacks to more than supervisor.code.max.unpacked.bytes "
                                  f"({self.max_unpacked})")

    @staticmethod
    def _download(url: str, dest: Path, limit: int, access: ApiAccess) -> tuple[str, int, str | None]:
        sha = hashlib.sha256()
        size = 0
        request = urllib.request.Request(url, headers=access.headers())
        try:
            with urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT, context=access.ssl_context) as resp, \
                    open(dest, "wb") as out:
                announced = resp.headers.get("X-Squall-Digest")
                while True:
                    chunk = resp.read(CHUNK)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > limit:
                        raise BundleError(f"bundle larger than nimbus.code.max.upload.bytes ({limit})")
                    sha.update(chunk)
                    out.write(chunk)
        except urllib.error.HTTPError as exc:
            raise BundleError(f"nimbus answered HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            host = urllib.parse.urlsplit(url).netloc
            if (tls := access.explain(exc, host)) is not None:
                raise BundleError(tls) from None
            reason = getattr(exc, "reason", exc)
            raise BundleError(f"cannot reach nimbus: {reason}") from None
        return sha.hexdigest(), size, announced

    @staticmethod
    def _install(tree: Path, target: Path) -> None:
        old = None
        if target.exists():  # another digest for the same id: swap it out
            old = target.with_name(f".old-{target.name}-{uuid.uuid4().hex[:8]}")
            os.rename(target, old)
        os.rename(tree, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def cleanup(self, keep: set[str]) -> list[str]:
        """Remove bundles (and leftover temp dirs) of topologies not in ``keep``."""
        busy = self.in_flight()
        removed: list[str] = []
        try:
            entries = list(self.root.iterdir())
        except FileNotFoundError:
            return removed
        for entry in entries:
            name = entry.name
            if name.startswith((".tmp-", ".old-")):
                if not any(name.startswith((f".tmp-{t}-", f".old-{t}-")) for t in busy):
                    shutil.rmtree(entry, ignore_errors=True)
                continue
            if name in keep or name in busy or not entry.is_dir():
                continue
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(name)
        return removed

