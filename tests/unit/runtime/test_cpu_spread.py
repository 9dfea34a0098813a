"""Which CPU a worker's runtime threads take: a host's workers take the CPUs in turn."""
import os

import pytest

from squall.runtime.affinity import choose_cpu, spread_key


@pytest.mark.parametrize("ports", [[6700, 6702], [41231, 50007], [6700, 6701, 6702, 6703], [9001, 7003, 8005]])
def test_the_workers_of_one_host_take_the_cpus_in_turn_whatever_their_ports(ports):
    keys = [spread_key(port, ports) for port in ports]
    assert sorted(keys) == list(range(len(ports)))
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:  # two workers of a host never share a CPU while another is free
        chosen = [choose_cpu(k) for k in sorted(keys)[:len(cpus)]]
        assert len(set(chosen)) == len(chosen)


def test_a_port_outside_the_known_slots_spreads_by_itself_and_local_mode_adds_the_pid():
    assert spread_key(6705, [6700, 6701]) == 6705
    assert spread_key(6705, []) == 6705
    assert spread_key(6701, [6700, 6701], local_pid=40) == 41
