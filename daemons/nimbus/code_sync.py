"""A standby nimbus's copy of the code: every live topology's bundle, fetched from the
leader and checked (Storm's nimbus code sync), so that it can take over and still serve it."""
from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable

import structlog

from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.nimbus.client import NimbusClient, NimbusError
from squall.daemons.nimbus.code_store import CodeStore, digest
from squall.daemons.nimbus.validate import UNPACK_FACTOR, SubmissionError, check_structure, read_bundle
from squall.daemons.state import ClusterState, ClusterStateError

log = structlog.get_logger("squall.nimbus")


class CodeSync:
    """Runs on its own thread every ``interval`` seconds while this nimbus is a standby."""

    def __init__(self, state: ClusterState, store: CodeStore, identifier: str, max_upload: int,
                 interval: float, is_leader: Callable[[], bool], stopping: threading.Event,
                 access: ApiAccess) -> None:
        self.state, self.store, self.identifier = state, store, identifier
        self.max_upload, self.interval = max_upload, interval
        self._is_leader, self._stopping = is_leader, stopping
        # The leader's API wants this nimbus's token (role supervisor or admin) and CA.
        self.access = access
        self._thread = threading.Thread(target=self._loop, name="nimbus-code-sync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval):
            if self._is_leader():
                continue
            try:
                self.sync_once()
            except ClusterStateError as exc:
                log.info("code sync skipped: ZooKeeper unavailable", error=str(exc))
            except Exception:  # noqa: BLE001 - retried next round
                log.exception("code sync failed")

    def sync_once(self) -> None:
        """Copy the bundles of live topologies from the leader; drop those of gone ones."""
        leader = self.state.nimbus_leader()
        infos = self.state.topologies()
        ids = set(self.state.topology_ids())
        for topology_id in self.store.ids():
            if topology_id not in ids:
                self.store.remove(topology_id)
        host, _, port = (leader or "").rpartition(":")
        if not leader or leader == self.identifier or not port.isdigit():
            return
        client = NimbusClient(host, int(port), timeout=60, access=self.access)
        for topology_id, info in sorted(infos.items()):
            if info.status == "killed" or self.store.has(topology_id) or self._stopping.is_set():
                continue
            try:
                data, _ = client.download_bundle(topology_id)
                if digest(data) != info.code_digest:
                    raise SubmissionError("digest does not match the topology's code_digest")
                _, raw_structure = read_bundle(io.BytesIO(data), self.max_upload * UNPACK_FACTOR)
                structure = json.loads(raw_structure)
                if not isinstance(structure, dict):
                    raise SubmissionError("structure.json is not an object")
                check_structure(structure)
            except (NimbusError, SubmissionError, ValueError) as exc:
                log.warning("code sync of a topology failed", topology_id=topology_id, leader=leader,
                            error=str(exc))
                continue
            with self.store.upload() as upload:
                upload.write(data)
                self.store.put(topology_id, upload, structure)
            log.info("code synced from the leader", topology_id=topology_id, leader=leader)
