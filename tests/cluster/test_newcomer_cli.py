"""What a newcomer meets on a real cluster: tracebacks through `squall errors`, warnings for
too few slots, a refused no-op rebalance, $SQUALL_TOKEN over the config file, a new token
that works at once, and one clear line from a nimbus without ZooKeeper. The topology's
exception text and printed lines carry terminal escapes (screen clear, window title, OSC 52
clipboard write): `errors`, `status` and `logs` show them escaped, `--raw` as they came."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from squall.testing.zookeeper import free_port

TOPOLOGY = '''\
import time

from squall import Bolt, Spout, TopologyBuilder


class Rows(Spout):
    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        time.sleep(0.05)
        self.n += 1
        self.collector.emit([self.n], msg_id=self.n)

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def look_for_moons(n):
    print("looking for moons\x1b[2J\x1b]0;owned\x07", flush=True)
    raise ValueError(f"no moons here ({n})\x1b]52;c;cm0gLXJmIH4=\x07")


class Moons(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        look_for_moons(tup["n"])

    def declare_output_fields(self, declarer):
        declarer.declare([])


def topology():
    builder = TopologyBuilder()
    builder.set_spout("rows", Rows(), 1)
    builder.set_bolt("moons", Moons(), 4).shuffle("rows")
    return builder.build()
'''


def squall(cluster, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("SQUALL_CONF", "SQUALL_TOKEN")}
    full.update({"SQUALL_CONF": str(cluster.client_conf), **(env or {})})
    return subprocess.run([sys.executable, "-m", "squall.cli", *args], env=full, capture_output=True,
                          text=True, timeout=60)


def test_errors_warnings_and_tokens_on_a_cluster(start_cluster, tmp_path: Path) -> None:
    cluster = start_cluster(supervisors=2, slots=2)  # four slots
    app = tmp_path / "app"
    app.mkdir()
    (app / "moons.py").write_text(TOPOLOGY)

    submitted = squall(cluster, "submit", str(app / "moons.py"), "-c", "topology.workers=6")
    assert submitted.returncode == 0, submitted.stderr
    assert ("warning: 6 workers requested but only 4 free slots: it runs on 4 workers until more "
            "slots are free") in submitted.stderr

    cluster.wait_for(lambda: cluster.client.topology_errors("moons")["errors"], 60, "an error report")
    shown = squall(cluster, "errors", "moons", "-n", "1")
    assert shown.returncode == 0, shown.stderr
    assert "moons task " in shown.stdout and "    Traceback (most recent call last):" in shown.stdout
    # The file as the worker runs it: the supervisor's copy of the submitted code.
    assert '/moons.py", line 29, in execute\n        look_for_moons(tup["n"])' in shown.stdout
    assert shown.stdout.rstrip().splitlines()[-1].strip().startswith("ValueError: no moons here (")
    status = squall(cluster, "status", "moons")
    assert "last errors (with tracebacks: squall errors moons):" in status.stdout, status.stdout
    # What the topology wrote reaches the terminal escaped; --raw gives the bytes.
    logs = squall(cluster, "logs", "moons", "--component", "moons", "-n", "200")
    assert logs.returncode == 0, logs.stderr
    for out in (shown.stdout, status.stdout, logs.stdout):
        assert "\x1b" not in out and "\x07" not in out, out[-500:]
    assert ")\\x1b]52;c;cm0gLXJmIH4=\\x07" in shown.stdout and ")\\x1b]52;" in status.stdout
    assert "looking for moons\\x1b[2J\\x1b]0;owned\\x07" in logs.stdout
    assert ")\x1b]52;c;cm0gLXJmIH4=\x07" in squall(cluster, "errors", "moons", "-n", "1", "--raw").stdout
    assert "\x1b[2J" in squall(cluster, "logs", "moons", "--component", "moons", "-n", "200", "--raw").stdout

    noop = squall(cluster, "rebalance", "moons")
    assert noop.returncode == 2 and "say what to change" in noop.stderr
    assert json.loads(squall(cluster, "status", "moons", "--json").stdout)["status"] == "active"
    wider = squall(cluster, "rebalance", "moons", "-n", "8", "--wait", "0")
    assert wider.returncode == 0, wider.stderr
    assert "warning: 8 workers requested but only 4 free slots" in wider.stderr

    # A token added to the file works on its first request, and $SQUALL_TOKEN wins over the
    # admin token in the client config: this one is a viewer's, which may not kill.
    tokens_file = yaml.safe_load((cluster.base / "nimbus.yaml").read_text())["nimbus.auth.tokens.file"]
    added = squall(cluster, "token", "add", "--file", tokens_file, "--user", "dora", "--role", "viewer")
    assert added.returncode == 0, added.stderr
    viewer = {"SQUALL_TOKEN": added.stdout.strip()}
    listed = squall(cluster, "list", env=viewer)
    assert listed.returncode == 0 and "moons" in listed.stdout, listed.stderr
    refused = squall(cluster, "kill", "moons", env=viewer)
    assert refused.returncode == 1 and "user 'dora' (role viewer) may not control" in refused.stderr


def test_nimbus_without_zookeeper_says_it_once(tmp_path: Path) -> None:
    conf = tmp_path / "squall.yaml"
    conf.write_text(yaml.safe_dump({"zookeeper.port": free_port(), "zookeeper.connection.timeout.ms": 3000,
                                    "nimbus.port": free_port(), "nimbus.host": "127.0.0.1",
                                    "squall.local.dir": str(tmp_path / "local")}))
    env = {**os.environ, "SQUALL_CONF": str(conf)}
    out = subprocess.run([sys.executable, "-m", "squall.cli", "nimbus"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1
    text = out.stdout + out.stderr
    about_zookeeper = [line for line in text.splitlines() if "ZooKeeper" in line and "SECURITY" not in line]
    assert len(about_zookeeper) == 1, text
    assert "cannot connect to ZooKeeper at 127.0.0.1:" in about_zookeeper[0]
    assert "is it running there (zookeeper.servers, zookeeper.port)?" in about_zookeeper[0]
    assert "Connection dropped" not in text and "Traceback" not in text
