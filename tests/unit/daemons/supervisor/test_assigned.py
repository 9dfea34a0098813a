"""What each port runs, from this supervisor's parts of the assignments: a malformed part
keeps its workers (issue 20), ports it does not have and clashes are warned about."""
from __future__ import annotations

from squall.daemons.state import NodeAssignment
from squall.daemons.supervisor.assigned import port_assignments
from squall.daemons.supervisor.slot import SlotAssignment


def test_parts_become_slot_assignments():
    parts = {"a": NodeAssignment("a", "d1", {6700: [(1, 2)], 6701: [(3, 3)]}),
             "b": NodeAssignment("b", "d2", {6702: [(1, 1)]})}
    out, problems = port_assignments([6700, 6701, 6702], parts, {})
    assert out == {6700: SlotAssignment("a", [(1, 2)], "d1"), 6701: SlotAssignment("a", [(3, 3)], "d1"),
                   6702: SlotAssignment("b", [(1, 1)], "d2")}
    assert problems == []


def test_a_malformed_part_keeps_what_its_ports_run():
    running = {6700: SlotAssignment("a", [(1, 2)], "d1"), 6701: SlotAssignment("b", [(1, 1)], "d2"), 6702: None}
    out, problems = port_assignments([6700, 6701, 6702], {"a": None}, running)
    assert out == {6700: running[6700]}  # b's part is gone: that port stops; a's is unreadable: it stays
    assert [p.key for p in problems] == [("malformed", "a")] and problems[0].fields["ports"] == [6700]


def test_unknown_ports_and_clashes_are_problems_not_orders():
    parts = {"a": NodeAssignment("a", "d1", {6700: [(1, 1)], 7000: [(2, 2)]}),
             "b": NodeAssignment("b", "d2", {6700: [(1, 1)]})}
    out, problems = port_assignments([6700], parts, {})
    assert out == {6700: SlotAssignment("a", [(1, 1)], "d1")}
    assert sorted(p.key for p in problems) == [("clash", "b", 6700), ("port", "a", 7000)]
