"""Where a topology's executors run: its assignment computed (``scheduler``, plain code) from
what nimbus heard, and written when it changed. Also what that needs of the stored code:
each topology's components and executors, cached until its parallelism changes."""
from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any

import structlog

from squall.daemons.nimbus.code_store import CodeStore
from squall.daemons.nimbus.heard import Hearing
from squall.daemons.nimbus.liveness import vouched_while_away
from squall.daemons.nimbus.scheduler import (
    ExecutorId,
    RoundSlots,
    Slot,
    SlotUse,
    all_heard,
    by_slot,
    compute_assignment,
    dead_executors,
    even_split,
    start_times_after,
    worker_shortfall,
)
from squall.daemons.nimbus.validate import SubmissionError, check_structure
from squall.daemons.state import Assignment, ClusterState, SupervisorInfo, TopologyInfo
from squall.daemons.warn_once import WarnOnce
from squall.model import executors as executors_of
from squall.model import system_counts, task_ids

log = structlog.get_logger("squall.nimbus")


class Placement:
    """The leader's scheduling of one topology at a time (``reassign``), with the caches that
    keep a steady round cheap."""

    def __init__(self, conf: Mapping[str, Any], state: ClusterState, store: CodeStore, hearing: Hearing,
                 warn_once: WarnOnce, counts: Counter[str]) -> None:
        self.state = state
        self.store = store
        self.hearing = hearing
        self._warn_once = warn_once
        self.counts = counts
        self.task_timeout = float(conf["nimbus.task.timeout.secs"])
        self.launch_timeout = float(conf["nimbus.task.launch.secs"])
        self._counts: dict[str, dict[str, tuple[int, int]]] = {}  # structure cache by topology id
        self._components: dict[str, tuple[Any, dict[ExecutorId, str]]] = {}  # by topology id
        self._shapes: dict[str, tuple[Any, ...]] = {}  # by topology id: see _shape
        self.slot_use = SlotUse({})  # which topology holds which slot, kept from round to round

    def restart(self) -> None:
        """A new leadership counts the slots' use afresh."""
        self.slot_use = SlotUse({})

    def remember(self, topology_id: str, counts: dict[str, tuple[int, int]]) -> None:
        """A submission's component counts, known before its structure is read back."""
        self._counts[topology_id] = counts

    def forget(self, topology_id: str) -> None:
        self._counts.pop(topology_id, None)

    def retain(self, ids: set[str]) -> None:
        """Forget the topologies that are gone (a round's end)."""
        self._counts = {k: v for k, v in self._counts.items() if k in ids}
        self._components = {k: v for k, v in self._components.items() if k in ids}
        self._shapes = {k: v for k, v in self._shapes.items() if k in ids}

    def component_counts(self, topology_id: str) -> dict[str, tuple[int, int]] | None:
        """component -> (parallelism, num_tasks) from the stored structure.json, or None."""
        counts = self._counts.get(topology_id)
        if counts is None:
            structure = self.store.structure(topology_id)
            if structure is None:
                return None
            try:
                counts = check_structure(structure)
            except SubmissionError as exc:
                log.warning("stored structure.json is invalid", topology_id=topology_id, error=str(exc))
                return None
            self._counts[topology_id] = counts
        return counts

    def executor_components(self, info: TopologyInfo) -> dict[ExecutorId, str] | None:
        """Executor -> component, computed again only when the parallelism or the ackers
        change (every round asks it of every topology)."""
        counts = self.component_counts(info.id)
        if counts is None:
            return None
        key = (tuple(sorted(info.component_parallelism.items())), info.conf.get("topology.acker.executors"))
        cached = self._components.get(info.id)
        if cached is not None and cached[0] == key:
            return cached[1]
        system = system_counts(counts, info.conf)
        components = executors_of(system, task_ids(system), info.component_parallelism)
        self._components[info.id] = (key, components)
        return components

    def reassign(self, info: TopologyInfo, assignments: dict[str, Assignment],
                 supervisors: Mapping[str, SupervisorInfo], now: float,
                 scratch: bool = False, hold: bool = False, slots: RoundSlots | None = None) -> Assignment | None:
        """Compute the topology's assignment and write it if it changed; returns the one in force.

        ``hold`` (the grace after a reconnection): an existing assignment stays as it is; beats
        are still read, so that they are timed from now. ``slots``: the round's (its slot use
        kept up to date here), else made from ``supervisors`` and ``assignments``."""
        topology_id = info.id
        current = assignments.get(topology_id)
        if hold and current is not None and not scratch:
            self.hearing.observed_beats(topology_id, now, current)
            return current
        components = self.executor_components(info)
        if components is None and current is None:
            self._warn_once((topology_id, "no-code"), "cannot schedule: this nimbus has no code for it",
                            topology_id=topology_id)
            return None
        # Without code here, the executor set stays as it is.
        wanted_set: Mapping[ExecutorId, Any] = (components if components is not None
                                                else current.executors)  # type: ignore[union-attr]
        cur_map: Mapping[ExecutorId, Slot] = current.executors if current else {}
        cur_start = current.executor_start if current else {}
        placed, even = self._shape(topology_id, current, wanted_set, info.num_workers)
        dead: set[ExecutorId] = set()
        if cur_map and not scratch:
            beats: Mapping[Slot, tuple[float, Collection[ExecutorId]]] = self.hearing.observed_beats(
                topology_id, now, current)
            if self.hearing.vouched:
                beats = vouched_while_away(beats, placed, self.hearing.vouched)
            if not all_heard(placed, beats, now, self.task_timeout):
                dead = dead_executors(cur_map, beats, cur_start, now, self.task_timeout, self.launch_timeout)
        if slots is None:
            slots = RoundSlots.of({sid: s.usable_ports for sid, s in supervisors.items()},
                                  {tid: a.executors for tid, a in assignments.items()})
        if (not scratch and not dead and even and all(port in slots.ports.get(node, ()) and
                                                      slots.used.held_alone(topology_id, (node, port))
                                                      for node, port in placed)):
            new = cur_map  # healthy and unchanged (scheduler.keeps_current): most topologies, most rounds
        else:
            new = compute_assignment(sorted(wanted_set), info.num_workers, cur_map, set(cur_map) - dead, slots.ports,
                                     slots.used.by_others(topology_id), scratch=scratch, live=slots.live)
        if not new:
            self._warn_once((topology_id, "no-slots"), "no free slot: the topology waits for one",
                            topology_id=topology_id, executors=len(wanted_set))
            return current
        self._warn_once.discard((topology_id, "no-slots"))
        node_host = {node: supervisors[node].host for node, _ in set(new.values())}
        if (current is not None and new == cur_map and node_host == current.node_host
                and current.code_digest == info.code_digest):
            return current
        assignment = Assignment(
            topology_id=topology_id, executors=dict(new), node_host=node_host,
            executor_start=start_times_after(cur_map, new, cur_start, now),
            code_digest=info.code_digest, version=(current.version + 1) if current else 1)
        if current is not None:
            self.state.set_assignment(assignment, current)
        else:  # new, or its stored assignment is unreadable: the state layer looks for old parts
            self.state.set_assignment(assignment)
        assignments[topology_id] = assignment
        slots.used.update(topology_id, new)
        moved = sum(1 for ex, slot in new.items() if cur_map.get(ex) not in (None, slot))
        self.counts["assignments"] += 1
        self.counts["moved"] += moved
        log.info("assignment written", topology_id=topology_id, version=assignment.version,
                 workers=len(assignment.slots()), executors=len(new), moved=moved, dead=len(dead),
                 scratch=scratch)
        short = worker_shortfall(info.num_workers, len(wanted_set), new)
        if short:
            log.warning("not enough free slots for the requested workers", topology_id=topology_id,
                        requested=info.num_workers, missing=short)
        return assignment

    def _shape(self, topology_id: str, current: Assignment | None, wanted: Mapping[ExecutorId, Any],
               num_workers: int) -> tuple[dict[Slot, frozenset[ExecutorId]], bool]:
        """The assignment's executors by slot, and whether it is an even split of ``wanted``
        (scheduler.even_split): worked out again only when the assignment, the executor set
        or the worker count changes, not every round."""
        cached = self._shapes.get(topology_id)
        if cached is not None and cached[0] is current and cached[1] is wanted and cached[2] == num_workers:
            return cached[3]
        placed = by_slot(current.executors) if current is not None else {}
        shape = (placed, current is not None and even_split(sorted(wanted), num_workers, current.executors, placed))
        self._shapes[topology_id] = (current, wanted, num_workers, shape)
        return shape
