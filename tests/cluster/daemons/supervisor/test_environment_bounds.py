"""A topology environment build step is bounded in disk as it runs (supervisor.venv.max.mb),
with a real process: one writing past the bound is killed within seconds, not left to fill
the disk until the build's deadline, and the error names the key."""
import os
import time

import pytest

from squall.config import build_config
from squall.daemons.supervisor.environments import EnvBuildError, TopologyEnvironments

pytestmark = pytest.mark.cluster


def test_a_build_step_that_grows_past_the_size_bound_is_killed_and_named(tmp_path):
    conf = build_config({"supervisor.venv.max.mb": 1, "supervisor.venv.build.timeout.secs": 60})
    envs = TopologyEnvironments(tmp_path / "venvs", tmp_path / "topologies", conf, None, lambda: None)
    target = tmp_path / "venvs" / "v"
    target.mkdir(parents=True)
    started = time.monotonic()
    with pytest.raises(EnvBuildError, match=r"^pip install took more than supervisor.venv.max.mb \(1 MB\) of disk: "
                                            r"2 MB so far"):
        envs._run(["sh", "-c", f"echo $$ > {tmp_path}/pid; head -c 3000000 /dev/zero > {target}/big; sleep 50"],
                  started + 60, tmp_path / "log", tmp_path, dict(os.environ), "pip install", watched=(target,))
    assert time.monotonic() - started < 15
    assert envs.build_pids() == set()
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):  # the step's shell and its sleep are gone, reaped
        os.kill(pid, 0)
