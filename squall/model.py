"""Storm's task and executor model, and the system topology added to a user's: the acker,
for a checkpointed topology the checkpoint barrier edges, and for one that registers
metrics consumers their bolts and the ``__system`` component.

Tasks get topology-wide ids from 1, component by component in id order; an executor is a
contiguous range ``(start, end)`` of one component's task ids. ``__system`` is the
exception: its one task has the id -1 in every worker, which runs it whatever its
assignment says (it is never scheduled).
"""
from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from typing import Any

from squall import grouping as g
from squall.components import StreamDeclaration
from squall.grouping import Grouping
from squall.metrics_consumer import MetricsConsumerBolt, registrations
from squall.system_component import METRICS_FIELDS, METRICS_STREAM, SYSTEM_TASK, TICK_SECS, SystemBolt
from squall.topology import BOLT, SPOUT, ComponentSpec, Subscription, Topology
from squall.tuple import SYSTEM_COMPONENT, Fields

ACKER = "__acker"
CHECKPOINT = "__checkpoint"  # the checkpoint spout of a stateful topology (squall.state)
CHECKPOINT_STREAM = "__checkpoint"   # the barrier stream every component of such a topology declares
CHECKPOINT_FIELDS = Fields(["txid", "action", "epoch"])
ACK_ACK, ACK_FAIL = "__ack_ack", "__ack_fail"
# Acker traffic is batched: one system tuple per flush and destination carries
#   __ack_ack  to the acker:   [{root: xor, ...}]  (a spout's init and bolts' acks alike; between workers
#              the map crosses as packed (root, xor) pairs, squall.runtime.serialization)
#   __ack_fail to the acker:   [[root, ...]]
#   __ack_ack / __ack_fail from the acker to a spout task: [[root, ...]]
# A failed tree whose tuple could not be delivered (squall.runtime.refusals) is a
# [root, reason] entry of a __ack_fail batch instead of its root alone: its spout hears
# ``undeliverable``. (Plain fails keep the shape workers of earlier versions send and read.)
ACKER_STREAMS = {ACK_ACK: Fields(["batch"]), ACK_FAIL: Fields(["batch"])}

ExecutorId = tuple[int, int]
Slot = tuple[str, int]  # (supervisor/node id, port); local mode: ("local", worker number)


def acker_count(conf: Mapping[str, Any]) -> int:
    n = conf.get("topology.acker.executors")
    return int(conf.get("topology.workers", 1)) if n is None else int(n)


def is_checkpointed(topology: Topology) -> bool:
    """Does ``topology`` have the checkpoint spout (a stateful component asked for it)?"""
    return CHECKPOINT in topology.components


def checkpoint_edges(topology: Topology, conf: Mapping[str, Any]) -> dict[str, ComponentSpec]:
    """The components of a checkpointed topology with its barrier edges (Storm's
    ``$checkpoint`` stream): every spout subscribes to the checkpoint spout, every bolt to
    each component it reads from, all with an all grouping, and every component declares
    the stream. The checkpoint spout's tuples time out after
    ``topology.state.checkpoint.timeout.secs`` when that is set."""
    every = Grouping(g.ALL)
    decl = StreamDeclaration(CHECKPOINT_FIELDS, False)
    out: dict[str, ComponentSpec] = {}
    for c in topology.components.values():
        if c.id == CHECKPOINT:
            timeout = conf.get("topology.state.checkpoint.timeout.secs")
            out[c.id] = c.replace(config={**c.config, "topology.message.timeout.secs": timeout}) if timeout else c
            continue
        if c.kind == SPOUT:
            extra = [Subscription(CHECKPOINT, CHECKPOINT_STREAM, every)]
        else:
            ups = sorted({s.component for s in c.inputs})
            extra = [Subscription(u, CHECKPOINT_STREAM, every) for u in ups]
        out[c.id] = c.replace(inputs=[*c.inputs, *extra], streams={**c.streams, CHECKPOINT_STREAM: decl})
    return out


def metrics_components(conf: Mapping[str, Any]) -> dict[str, ComponentSpec]:
    """The bolts of the metrics consumers ``conf`` registers (squall.metrics_consumer) and
    the ``__system`` component that feeds them; none when it registers none."""
    regs = registrations(conf)
    if not regs:
        return {}
    feed = [Subscription(SYSTEM_COMPONENT, METRICS_STREAM, Grouping(g.SHUFFLE))]
    out = {SYSTEM_COMPONENT: ComponentSpec(
        SYSTEM_COMPONENT, BOLT, pickle.dumps(SystemBolt(), protocol=5), 1, 1,
        {"topology.tick.tuple.freq.secs": TICK_SECS}, [],
        {METRICS_STREAM: StreamDeclaration(METRICS_FIELDS, False)})}
    for reg in regs:
        bolt = pickle.dumps(MetricsConsumerBolt(reg), protocol=5)
        out[reg.component_id] = ComponentSpec(reg.component_id, BOLT, bolt, reg.parallelism, reg.parallelism, {},
                                              feed, {})
    return out


def system_topology(topology: Topology, conf: Mapping[str, Any]) -> Topology:
    """The user's topology plus ``__acker`` (unless acking is off), when it is
    checkpointed its barrier edges (``checkpoint_edges``), and its metrics consumers
    (``metrics_components``). The acker is an ordinary component with tasks and executors;
    its subscriptions are declared only for the record, since ack traffic is routed to the
    acker a root id picks (squall.runtime.acker) directly."""
    comps = dict(checkpoint_edges(topology, conf) if is_checkpointed(topology) else topology.components)
    n = acker_count(conf)
    if n:
        inputs = [Subscription(c.id, s, Grouping(g.FIELDS, ["id"])) for c in comps.values()
                  for s in (ACK_ACK, ACK_FAIL)]
        streams = {ACK_ACK: StreamDeclaration(ACKER_STREAMS[ACK_ACK], True),
                   ACK_FAIL: StreamDeclaration(ACKER_STREAMS[ACK_FAIL], True)}
        comps[ACKER] = ComponentSpec(ACKER, BOLT, b"", n, n, {}, inputs, streams)
    comps.update(metrics_components(conf))
    return topology.replace_components(comps)


def system_executors(system: Topology) -> list[ExecutorId]:
    """The executors every worker runs besides those assigned to it: ``__system``'s."""
    return [(SYSTEM_TASK, SYSTEM_TASK)] if SYSTEM_COMPONENT in system.components else []


def component_counts(topology: Topology) -> dict[str, tuple[int, int]]:
    """component -> (parallelism, num_tasks): all that scheduling needs of a topology.
    Nimbus works from these (it never unpickles user code)."""
    return {c.id: (c.parallelism, c.num_tasks) for c in topology.components.values()}


def system_counts(counts: Mapping[str, tuple[int, int]], conf: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """``counts`` plus the acker and the metrics consumers' bolts, as ``system_topology``
    adds them (not ``__system``, which is never scheduled)."""
    n = acker_count(conf)
    out = {k: (int(p), int(t)) for k, (p, t) in counts.items()}
    if n:
        out[ACKER] = (n, n)
    for reg in registrations(conf):
        out[reg.component_id] = (reg.parallelism, reg.parallelism)
    return dict(sorted(out.items()))


def task_ids(topology: Topology | Mapping[str, tuple[int, int]]) -> dict[int, str]:
    """task id -> component id (from a topology or from ``component_counts``)."""
    counts = component_counts(topology) if isinstance(topology, Topology) else topology
    out: dict[int, str] = {}
    next_id = 1
    for comp in sorted(counts):
        if comp == SYSTEM_COMPONENT:
            out[SYSTEM_TASK] = comp
            continue
        for _ in range(counts[comp][1]):
            out[next_id] = comp
            next_id += 1
    return out


def component_tasks(task_to_component: Mapping[int, str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, c in sorted(task_to_component.items()):
        out.setdefault(c, []).append(t)
    return out


def partition(tasks: list[int], parts: int) -> list[ExecutorId]:
    """Split sorted task ids into ``parts`` contiguous ranges, sizes differing by at most one."""
    parts = max(1, min(parts, len(tasks)))
    base, extra = divmod(len(tasks), parts)
    out, i = [], 0
    for p in range(parts):
        size = base + (1 if p < extra else 0)
        out.append((tasks[i], tasks[i + size - 1]))
        i += size
    return out


def executors(topology: Topology | Mapping[str, tuple[int, int]], task_to_component: Mapping[int, str],
              parallelism: Mapping[str, int] | None = None) -> dict[ExecutorId, str]:
    """executor -> component, for scheduling (not ``__system``'s, which every worker
    runs); ``parallelism`` overrides a component's (rebalance)."""
    counts = component_counts(topology) if isinstance(topology, Topology) else topology
    by_comp = component_tasks(task_to_component)
    out: dict[ExecutorId, str] = {}
    for comp in sorted(counts):
        if comp == SYSTEM_COMPONENT:
            continue
        n = (parallelism or {}).get(comp, counts[comp][0])
        for ex in partition(by_comp[comp], n):
            out[ex] = comp
    return out


def executor_tasks(executor: ExecutorId) -> range:
    return range(executor[0], executor[1] + 1)


def schedule_even(executors: Sequence[ExecutorId], slots: Sequence[Slot]) -> dict[ExecutorId, Slot]:
    """Spread executors round-robin over ``slots`` in the given order (Storm's even scheduler;
    local mode places its executors with it)."""
    if not slots:
        raise ValueError("no slots to schedule onto")
    return {ex: slots[i % len(slots)] for i, ex in enumerate(sorted(executors))}
