"""Where a supervisor puts its workers' cgroups, from the kernel's own descriptions; how long
removing them may take, by the clock it is given."""
from __future__ import annotations

from pathlib import Path

from squall.daemons.supervisor.cgroups import cgroup2_mount, end_tree, own_cgroup, parent_dir

HYBRID = """\
25 24 0:22 / /sys/fs/cgroup rw,relatime shared:8 - tmpfs tmpfs rw,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:24 / /sys/fs/cgroup/memory rw,nosuid shared:10 - cgroup cgroup rw,memory
"""
UNIFIED = "30 24 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"
NONE = "22 1 0:21 / /proc rw,nosuid shared:12 - proc proc rw\n"


def test_the_cgroup2_mount_is_found_on_hybrid_and_unified_hosts():
    assert cgroup2_mount(HYBRID) == "/sys/fs/cgroup/unified"
    assert cgroup2_mount(UNIFIED) == "/sys/fs/cgroup"
    assert cgroup2_mount(NONE) is None


def test_the_own_cgroup_is_the_v2_line():
    assert own_cgroup("4:memory:/process_api/x\n0::/\n") == "/"
    assert own_cgroup("0::/system.slice/squall-supervisor.service\n") == "/system.slice/squall-supervisor.service"
    assert own_cgroup("4:memory:/x\n") is None


def test_parent_dir_auto_is_the_supervisors_own_cgroup():
    service = "0::/system.slice/squall-supervisor.service\n"
    assert parent_dir("auto", UNIFIED, service) == Path("/sys/fs/cgroup/system.slice/squall-supervisor.service")
    assert parent_dir("auto", HYBRID, "0::/\n") == Path("/sys/fs/cgroup/unified")
    assert parent_dir("auto", NONE, "0::/\n") is None
    assert parent_dir("off", UNIFIED, service) is None
    assert parent_dir("/sys/fs/cgroup/squall", NONE, "") == Path("/sys/fs/cgroup/squall")


class SteppingClock:
    """Each read moves time on by ``step`` seconds."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def time(self) -> float:
        return self.monotonic()

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


def test_end_tree_gives_up_at_the_deadline_of_the_clock_it_is_given(tmp_path: Path) -> None:
    base = tmp_path / "squall-sup"
    base.mkdir()
    (base / "cgroup.procs").write_text("")  # rmdir fails, as on a group a process still holds
    clock = SteppingClock(10.0)
    assert end_tree(base, timeout=30.0, clock=clock) is False
    assert base.exists()
    assert clock.now == 40.0  # deadline 40 s: read at 20, 30, then 40, by this clock alone
