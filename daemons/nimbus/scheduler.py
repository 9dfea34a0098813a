"""Scheduling: which worker slot runs each executor. Plain functions over plain data, no I/O.

Nimbus calls these with what it read from ZooKeeper: live supervisors and their ports, every
topology's current assignment, worker beats. Everything here is deterministic: inputs are
sorted before any choice, so the same cluster state always gives the same assignment.

Storm's facts kept: slots are handed out interleaved across supervisors (``sort-slots``);
executors are spread evenly over at most ``topology.workers`` slots; the DefaultScheduler
keeps a live worker where it is when its executor count still fits the even split, so a
lost worker does not reshuffle the healthy ones.
"""
from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

# The even round-robin placement lives in the model (local mode uses it too).
from squall.model import ExecutorId, Slot, schedule_even  # noqa: F401 (schedule_even: part of this API)

# --- slots ---------------------------------------------------------------------------------

def live_slots(supervisors: Mapping[str, Iterable[int]]) -> set[Slot]:
    """Every (node, port) that a live supervisor offers."""
    return {(node, int(port)) for node, ports in supervisors.items() for port in ports}


def slots_in_use(
    assignments: Mapping[str, Mapping[ExecutorId, Slot]], exclude_topology: str | None = None
) -> set[Slot]:
    """Slots holding some topology's executors, ignoring ``exclude_topology``'s own."""
    return {
        tuple(slot)  # type: ignore[misc]
        for topology_id, assignment in assignments.items()
        if topology_id != exclude_topology
        for slot in assignment.values()
    }


class SlotUse:
    """Which topologies hold each slot, for one leader round: built once from every
    assignment and updated as the round rewrites them, so that what the others hold costs a
    topology a set difference, not a pass over every executor of the cluster."""

    def __init__(self, assignments: Mapping[str, Mapping[ExecutorId, Slot]]) -> None:
        self._owners: dict[Slot, set[str]] = {}
        self._held: dict[str, set[Slot]] = {}
        self._applied: dict[str, Mapping[ExecutorId, Slot]] = {}  # topology -> the mapping last applied
        self.sync(assignments)

    def sync(self, assignments: Mapping[str, Mapping[ExecutorId, Slot]]) -> None:
        """Bring the use up to ``assignments`` (every topology's executors), going over the
        executors only of topologies whose mapping is not the very object last applied:
        kept from round to round, a round in which no assignment changed costs a pass over
        the topologies, not over every executor of the cluster. Mappings applied must not be
        changed afterwards (the cluster state's cached reads are not)."""
        for topology_id in self._applied.keys() - assignments.keys():
            self.update(topology_id, {})
        for topology_id, executors in assignments.items():
            if self._applied.get(topology_id) is not executors:
                self.update(topology_id, executors)

    def update(self, topology_id: str, executors: Mapping[ExecutorId, Slot]) -> None:
        """``topology_id`` holds the slots of ``executors`` now (none: it holds nothing)."""
        self._applied.pop(topology_id, None)
        if executors:
            self._applied[topology_id] = executors
        for slot in self._held.pop(topology_id, set()):
            owners = self._owners[slot]
            owners.discard(topology_id)
            if not owners:
                del self._owners[slot]
        held = set(executors.values())  # (node, port) tuples, as assignments hold them
        if held:
            self._held[topology_id] = held
        for slot in held:
            self._owners.setdefault(slot, set()).add(topology_id)

    def held_alone(self, topology_id: str, slot: Slot) -> bool:
        """Whether ``topology_id`` is the only one holding ``slot`` (it is not among
        ``by_others``), found without building that set."""
        return self._owners.get(slot) == {topology_id}

    def by_others(self, topology_id: str) -> set[Slot]:
        """Slots some other topology holds (``slots_in_use(..., exclude_topology)``)."""
        alone = {slot for slot in self._held.get(topology_id, ()) if len(self._owners[slot]) == 1}
        return self._owners.keys() - alone


@dataclass
class RoundSlots:
    """What one leader round places topologies on, made once for the round: the live
    supervisors' ports, their slots, and which topology holds which (kept up to date)."""

    ports: dict[str, list[int]]
    live: set[Slot]
    used: SlotUse

    @classmethod
    def of(cls, ports: Mapping[str, Iterable[int]],
           assignments: Mapping[str, Mapping[ExecutorId, Slot]], used: SlotUse | None = None) -> RoundSlots:
        """``used``: a use kept from earlier rounds, brought up to ``assignments`` (``SlotUse.sync``)."""
        listed = {node: list(p) for node, p in ports.items()}
        if used is None:
            used = SlotUse(assignments)
        else:
            used.sync(assignments)
        return cls(listed, live_slots(listed), used)


def by_slot(current: Mapping[ExecutorId, Slot]) -> dict[Slot, frozenset[ExecutorId]]:
    """An assignment's executors grouped by slot."""
    grouped: dict[Slot, list[ExecutorId]] = {}
    for ex, slot in current.items():
        grouped.setdefault(slot, []).append(ex)
    return {slot: frozenset(execs) for slot, execs in grouped.items()}


def even_split(wanted: Sequence[ExecutorId], num_workers: int, current: Mapping[ExecutorId, Slot],
               slots: Mapping[Slot, Collection[ExecutorId]]) -> bool:
    """Whether ``current`` (grouped as ``slots``) holds exactly ``wanted``, over as many slots
    as the topology wants, in sizes of an even split: the shape :func:`compute_assignment`
    keeps. Depends on the assignment alone: the leader works it out once per assignment."""
    if not current or len(wanted) != len(current) or any(ex not in current for ex in wanted):
        return False
    if len(slots) != min(num_workers, len(wanted)):
        return False
    return Counter(len(execs) for execs in slots.values()) == even_sizes(len(wanted), len(slots))


def keeps_current(wanted: Sequence[ExecutorId], num_workers: int, current: Mapping[ExecutorId, Slot],
                  dead: Collection[ExecutorId], supervisors: Mapping[str, Collection[int]],
                  used_by_others: Collection[Slot]) -> bool:
    """Whether :func:`compute_assignment` would give back ``current`` unchanged, found without
    running it: nothing dead, an :func:`even_split` of the same executors, every slot still
    offered and held by no one else. The leader asks this of every topology every round;
    most are healthy."""
    slots = by_slot(current)
    return (not dead and even_split(wanted, num_workers, current, slots)
            and all(port in supervisors.get(node, ()) and (node, port) not in used_by_others for node, port in slots))


def all_heard(slots: Mapping[Slot, Collection[ExecutorId]], beats: Mapping[Slot, tuple[float, Iterable[ExecutorId]]],
              now: float, task_timeout: float) -> bool:
    """Whether every slot's worker beat within ``task_timeout``, naming every executor of the
    slot: then :func:`dead_executors` finds none, whatever the start times (checked per slot,
    not per executor)."""
    for slot, execs in slots.items():
        beat = beats.get(slot)
        if beat is None or now - beat[0] > task_timeout or not set(execs).issubset(beat[1]):
            return False
    return True


def interleave_slots(slots: Iterable[Slot]) -> list[Slot]:
    """Order slots so consecutive picks alternate between supervisors (Storm's ``sort-slots``).

    Nodes with more slots come first (then by node id), ports ascending within a node:
    ``a:1 b:1 c:1 a:2 b:2 a:3``.
    """
    by_node: dict[str, list[int]] = {}
    for node, port in set(slots):
        by_node.setdefault(node, []).append(port)
    nodes = sorted(by_node, key=lambda n: (-len(by_node[n]), n))
    columns = [sorted(by_node[n]) for n in nodes]
    ordered: list[Slot] = []
    width = len(nodes)  # nodes are sorted by slot count: those with a slot in a row are a prefix
    for row in range(len(columns[0]) if columns else 0):
        while len(columns[width - 1]) <= row:
            width -= 1
        ordered.extend(zip(nodes[:width], [c[row] for c in columns[:width]]))
    return ordered


def available_slots(
    supervisors: Mapping[str, Iterable[int]],
    assignments: Mapping[str, Mapping[ExecutorId, Slot]],
    exclude_topology: str | None = None,
) -> list[Slot]:
    """Free slots of live supervisors, interleaved across supervisors.

    A slot is free when no topology other than ``exclude_topology`` has an executor on it
    (pass the topology being scheduled to count its own slots as free).
    """
    used = slots_in_use(assignments, exclude_topology)
    return interleave_slots(s for s in live_slots(supervisors) if s not in used)


# --- assignment ----------------------------------------------------------------------------

def _check_executors(executors: Iterable[ExecutorId]) -> list[ExecutorId]:
    checked = set()
    for ex in executors:
        start: object
        end: object
        try:
            start, end = ex
        except (TypeError, ValueError):
            start = end = None
        if type(start) is not int or type(end) is not int or start > end:  # a bool is no task id
            raise ValueError(f"bad executor {ex!r}: expected (start_task, end_task) with start <= end")
        checked.add((start, end))
    return sorted(checked)


def even_sizes(num_executors: int, num_slots: int) -> Counter[int]:
    """How many slots get each executor count when ``num_executors`` are split evenly."""
    if num_slots <= 0:
        return Counter()
    q, r = divmod(num_executors, num_slots)
    sizes = Counter({q + 1: r, q: num_slots - r})
    return +sizes  # drop zero counts


def compute_assignment(
    executors: Iterable[ExecutorId],
    num_workers: int,
    current: Mapping[ExecutorId, Slot],
    alive_executors: Iterable[ExecutorId],
    supervisors: Mapping[str, Iterable[int]],
    used_by_others: Iterable[Slot],
    *,
    scratch: bool = False,
    live: Collection[Slot] | None = None,
) -> dict[ExecutorId, Slot]:
    """One topology's new executor -> slot map (Storm's DefaultScheduler over EvenScheduler).

    * Usable slots are live supervisors' ports not in ``used_by_others``; the topology uses
      ``min(num_workers, len(executors), usable)`` of them, so with too few slots it runs on
      what there is (see :func:`worker_shortfall`) and with none it gets ``{}``.
    * A current slot stays as it is when it is usable and the number of its executors that
      are alive (and still wanted) fits the even split; its executors keep their placement.
      So an unchanged healthy topology gets back exactly ``current``.
    * Everything else (dead, new, on lost supervisors, in slots that no longer fit the
      split) is spread round-robin, executors sorted, over the remaining slots, chosen in
      this order: the topology's other slots still holding live executors, then free slots,
      then its slots whose executors all died (last, so dead workers' executors move away
      when there is anywhere else to go). Within each group a node with fewer of this
      topology's slots wins, then the interleaved order of :func:`interleave_slots`.
    * Rebalance is the same call with a new ``num_workers`` and/or executor set: the split
      changes, so only slots that fit it survive. ``scratch=True`` ignores ``current``
      entirely (Storm's rebalance reschedules the topology from scratch).
    * ``live``: :func:`live_slots` of ``supervisors``, when the caller has it already (a
      round places many topologies on the same supervisors).

    Slot counts differ by at most one executor, and each executor appears exactly once.
    """
    if num_workers < 1:
        raise ValueError(f"bad num_workers {num_workers!r}: must be at least 1")
    wanted = _check_executors(executors)
    wanted_set = set(wanted)
    alive = set(alive_executors)
    if live is None:
        live = live_slots(supervisors)
    others = used_by_others if isinstance(used_by_others, (set, frozenset)) else set(map(tuple, used_by_others))
    usable = set(live) - others

    # The topology's current slots still usable, with the executors that survive on them.
    own: dict[Slot, list[ExecutorId]] = {}
    if not scratch:
        for ex, slot in sorted(current.items()):
            slot = (slot[0], slot[1])
            if slot not in usable:
                continue
            survivors = own.setdefault(slot, [])
            if ex in wanted_set and ex in alive:
                survivors.append(ex)

    total = min(num_workers, len(wanted), len(usable))
    if total == 0:
        return {}

    # Keep slots whose survivor count fits the even split (Storm's bad-slots inverse).
    sizes = even_sizes(len(wanted), total)
    result: dict[ExecutorId, Slot] = {}
    kept: set[Slot] = set()
    for slot, survivors in sorted(own.items()):
        if survivors and sizes[len(survivors)] > 0:
            sizes[len(survivors)] -= 1
            kept.add(slot)
            for ex in survivors:
                result[ex] = slot

    to_place = [ex for ex in wanted if ex not in result]
    need = total - len(kept)
    if to_place and need:
        order = {slot: i for i, slot in enumerate(interleave_slots(usable))}

        def group(slot: Slot) -> int:
            if slot not in own:
                return 1  # free
            return 0 if own[slot] else 2  # own with live executors first, own-but-dead last

        node_load = Counter(node for node, _ in kept)
        # Each pick is the least (group, node's load, order); a pick raises one node's load,
        # so an entry whose load is stale goes back with the new one (a lazy heap: a large
        # cluster is not scanned once per pick).
        heap = [(1, node_load.get(s[0], 0), order[s], s) for s in usable - kept - own.keys()]
        heap += [(group(s), node_load[s[0]], order[s], s) for s in own.keys() - kept]
        heapq.heapify(heap)
        chosen: list[Slot] = []
        while len(chosen) < need:
            g, load, rank, best = heapq.heappop(heap)
            if load != node_load[best[0]]:
                heapq.heappush(heap, (g, node_load[best[0]], rank, best))
                continue
            chosen.append(best)
            node_load[best[0]] += 1
        # Round-robin over `need` slots reproduces exactly the remaining even sizes.
        for i, ex in enumerate(to_place):
            result[ex] = chosen[i % need]
    return result


def worker_shortfall(num_workers: int, num_executors: int, assignment: Mapping[ExecutorId, Slot]) -> int:
    """How many workers the topology lacks: wanted ``min(num_workers, executors)`` minus used slots.

    Positive after :func:`compute_assignment` means there were not enough free slots.
    """
    return max(0, min(num_workers, num_executors) - len(set(assignment.values())))


def slots_warning(num_workers: int, num_executors: int, free_slots: int) -> str | None:
    """What to tell whoever asked for ``num_workers`` workers when only ``free_slots`` slots
    can take the topology's ``num_executors`` executors; None when they are enough."""
    want = min(num_workers, num_executors)
    if free_slots >= want:
        return None
    if free_slots == 0:
        return "no free slots: the topology is scheduled when supervisors offer some"
    return (f"{num_workers} workers requested but only {free_slots} free slot{'s' if free_slots != 1 else ''}: "
            f"it runs on {free_slots} worker{'s' if free_slots != 1 else ''} until more slots are free")


def unassigned_executors(
    executors: Iterable[ExecutorId], assignment: Mapping[ExecutorId, Slot]
) -> list[ExecutorId]:
    """Executors with no slot (only when no slot at all was usable), sorted."""
    return sorted(ex for ex in set(executors) if ex not in assignment)


def start_times_after(
    old: Mapping[ExecutorId, Slot],
    new: Mapping[ExecutorId, Slot],
    old_start_times: Mapping[ExecutorId, float],
    now: float,
) -> dict[ExecutorId, float]:
    """Start time per executor of ``new``: unchanged placements keep theirs, moved or new get ``now``.

    As in Storm, the launch grace of :func:`dead_executors` counts from these.
    """
    return {
        ex: old_start_times[ex] if old.get(ex) == slot and ex in old_start_times else now
        for ex, slot in sorted(new.items())
    }


# --- liveness ------------------------------------------------------------------------------

def dead_executors(
    assignment: Mapping[ExecutorId, Slot],
    beats: Mapping[Slot, tuple[float, Iterable[ExecutorId]]],
    start_times: Mapping[ExecutorId, float],
    now: float,
    task_timeout: float,
    launch_timeout: float,
) -> set[ExecutorId]:
    """Executors of ``assignment`` whose worker has gone quiet (Storm's alive-executors, inverted).

    ``beats`` maps a slot to (time of its worker's last beat, executors that beat reported);
    nimbus should stamp that time with its own clock when it sees the beat change, as Storm
    does, so worker clock skew does not matter. An executor is alive while it is within
    ``launch_timeout`` of its start time (a new worker gets time to load); after that it
    is alive only if its slot's beat reports it and is at most ``task_timeout`` old. So it
    is dead when that beat is older than ``task_timeout``, or when it never beat and was
    assigned more than ``launch_timeout`` ago. A missing start time gives no launch grace.
    """
    # Executors each fresh beat reports, built once per slot: linear in executors + beats.
    heard: dict[Slot, set[ExecutorId]] = {}
    for slot, (last, reported) in beats.items():
        if now - last <= task_timeout:
            heard[(slot[0], slot[1])] = set(map(tuple, reported))  # type: ignore[arg-type]
    dead: set[ExecutorId] = set()
    for ex, slot in assignment.items():
        start = start_times.get(ex)
        if start is not None and now - start <= launch_timeout:
            continue
        if ex in heard.get((slot[0], slot[1]), ()):
            continue
        dead.add(ex)
    return dead
