"""Load-aware shuffling (Storm 2's LoadAwareShuffleGrouping): what a worker knows of its
target tasks' load, and the weights shuffle choosers draw from.

A task's load is how full its receive queue is (0..1): a task of this worker is read from
its queue; a task of another worker is what that worker last reported over the transport
(``Connection.get_load``; every worker sends its tasks' loads to its peers every
LOAD_SECS). As often, the worker refreshes every load-aware chooser's weights from those
loads: a task gets a share of tuples in proportion to ``(1 - load)**2`` (a full task still
gets a small share, so it is never cut off and its load keeps being measured).
local-or-shuffle keeps to this worker's tasks until their mean load reaches
``LOCAL_HIGH_LOAD``, then spreads over all its targets by weight.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

# How often a worker reports its tasks' loads to its peers and refreshes its choosers.
LOAD_SECS = 0.25
# The choices list a chooser cycles through holds about this many entries in all.
CHOICES = 1000
# local-or-shuffle leaves this worker's tasks once their mean load is at least this high
# (Storm's topology.localityaware.higher.bound).
LOCAL_HIGH_LOAD = 0.8
# The least weight a task keeps, out of 100 for an idle one.
MIN_WEIGHT = 1


def weights(tasks: Sequence[int], loads: Mapping[int, float]) -> list[int]:
    """Each task's weight out of 100: ``100 * (1 - load)**2``, at least MIN_WEIGHT; a task
    with no load known counts as idle. Squared, so that a task several times slower than
    its peers settles at a share it keeps up with while its queue is still below the
    backpressure mark (linear weights would leave it a third of the tuples at half full)."""
    out = []
    for t in tasks:
        idle = 1.0 - min(1.0, max(0.0, loads.get(t, 0.0)))
        out.append(max(MIN_WEIGHT, round(100 * idle * idle)))
    return out


def choices(tasks: Sequence[int], loads: Mapping[int, float], rng: random.Random) -> list[tuple[int]]:
    """The targets in proportion to their weights, shuffled: what a chooser cycles through."""
    w = weights(tasks, loads)
    total = sum(w)
    order = [(t,) for t, wt in zip(tasks, w) for _ in range(max(1, round(CHOICES * wt / total)))]
    rng.shuffle(order)
    return order


def local_pool(local: Sequence[int], remote: Sequence[int], loads: Mapping[int, float]) -> Sequence[int]:
    """local-or-shuffle's targets: this worker's tasks while they keep up, else all."""
    if not local or not remote:
        return list(local) or list(remote)
    mean = sum(min(1.0, loads.get(t, 0.0)) for t in local) / len(local)
    return list(local) if mean < LOCAL_HIGH_LOAD else [*local, *remote]


class LoadAwareChoices:
    """The choices of one load-aware chooser; ``order`` is replaced whole on each refresh, so
    the executor thread reading it never sees it half made."""

    __slots__ = ("local", "remote", "order", "rng")

    def __init__(self, local: Sequence[int], remote: Sequence[int], seed: int) -> None:
        self.local, self.remote = tuple(local), tuple(remote)
        self.rng = random.Random(seed)
        self.order: list[tuple[int]] = choices(local_pool(self.local, self.remote, {}), {}, self.rng)

    def refresh(self, loads: Mapping[int, float]) -> None:
        self.order = choices(local_pool(self.local, self.remote, loads), loads, self.rng)


class TaskLoads:
    """A worker's view of its target tasks' loads, and the load-aware choosers to refresh.

    ``local_load(task)`` reads a task of this worker; ``remote_load(tasks)`` asks the
    transport for the others' (both given by the worker). Choosers register from executor
    threads while they set up; ``refresh`` runs on the worker's transfer thread."""

    def __init__(self, local_load: Callable[[int], float],
                 remote_load: Callable[[Sequence[int]], Mapping[int, float]]) -> None:
        self._local_load = local_load
        self._remote_load = remote_load
        self._choosers: list[LoadAwareChoices] = []

    def register(self, local: Sequence[int], remote: Sequence[int], seed: int) -> LoadAwareChoices:
        """The choices of a new load-aware chooser over ``local`` (this worker's) and
        ``remote`` target tasks, kept up to date by ``refresh``."""
        chooser = LoadAwareChoices(local, remote, seed)
        self._choosers = [*self._choosers, chooser]  # replaced whole: refresh may be iterating
        return chooser

    def refresh(self) -> None:
        choosers = self._choosers
        if not choosers:
            return
        remote = sorted({t for c in choosers for t in c.remote})
        loads: dict[int, float] = dict(self._remote_load(remote)) if remote else {}
        for t in {t for c in choosers for t in c.local}:
            loads[t] = self._local_load(t)
        for c in choosers:
            c.refresh(loads)

