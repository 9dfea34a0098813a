"""The CLI in local mode and the word-count example (packaging: tests/cluster/test_install.py)."""
import json
import re
import subprocess
import sys

from support.paths import REPO

SQUALL = [sys.executable, "-c", "import sys; from squall.cli import main; sys.exit(main())"]


def run(args, timeout=60, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd="/", **kw)


def test_run_wordcount_locally_prints_a_summary_and_exits_0():
    out = run(SQUALL + ["run", str(REPO / "examples/wordcount.py"), "--local", "--duration", "2",
                        "-c", "topology.workers=2", "--log-format", "json"])
    assert out.returncode == 0, out.stderr
    assert "ran wordcount for" in out.stdout and "acked" in out.stdout
    assert "final counts: the=" in out.stdout
    events = [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]
    assert any(e.get("event") == "topology submitted" and e.get("topology", "").startswith("wordcount") for e in events)


RAISES = """
from squall import Bolt, TopologyBuilder
from squall.testing.components import FixedTupleSpout


class Boom(Bolt):
    def execute(self, t):
        if t.values[0] % 10 == 0:
            raise ValueError(f"no tens here: {t.values[0]}")
        self.collector.ack(t)

    def declare_output_fields(self, declarer):
        pass


CONFIG = {"squall.log.level": "ERROR"}


def topology():
    b = TopologyBuilder()
    b.set_spout("numbers", FixedTupleSpout("raises-numbers", [[i] for i in range(30)], ["n"]))
    b.set_bolt("boom", Boom()).shuffle("numbers")
    return b.build()
"""


def test_run_needs_no_local_flag_and_fails_when_a_component_raised(tmp_path):
    out = run(SQUALL + ["run", str(REPO / "examples/wordcount.py"), "--duration", "1"])
    assert out.returncode == 0, out.stderr  # no --local: local is run's only mode
    f = tmp_path / "raises.py"
    f.write_text(RAISES)
    out = run(SQUALL + ["run", str(f), "--local", "--duration", "2"])
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert re.search(r"errors in boom: \d+ \(last: ValueError: no tens here: [12]?0;", out.stderr), out.stderr
    assert re.search(r"components reported errors: boom \(\d+\)$", out.stderr.strip()), out.stderr


def test_usage_errors_exit_2_and_name_the_problem():
    out = run(SQUALL + ["run", str(REPO / "examples/wordcount.py"), "--local", "-c", "topology.workerz=2"])
    assert out.returncode == 2 and "unknown config key 'topology.workerz'" in out.stderr
    out = run(SQUALL + ["run", str(REPO / "examples/wordcount.py"), "--local", "--duration", "-1"])
    assert out.returncode == 2


def test_bad_topology_file_exits_1_with_reason(tmp_path):
    f = tmp_path / "notopo.py"
    f.write_text("x = 1\n")
    out = run(SQUALL + ["run", str(f), "--local", "--duration", "1"])
    assert out.returncode == 1 and "defines no topology() function" in out.stderr
    f.write_text("raise ImportError('no such thing')\n")
    out = run(SQUALL + ["run", str(f), "--local", "--duration", "1"])
    assert out.returncode == 1 and "importing" in out.stderr and "no such thing" in out.stderr


def test_wordcount_example_as_a_script():
    out = run([sys.executable, str(REPO / "examples/wordcount.py"), "--duration", "3"])
    assert out.returncode == 0, out.stderr
    assert "words/s" in out.stdout and "final counts: the=" in out.stdout
    final = dict(kv.split("=") for kv in out.stdout.split("final counts: ")[1].splitlines()[0].split(", "))
    # "the" is in four of the five sentences, twice in one: it must lead the counts
    assert max(final, key=lambda w: int(final[w])) == "the"
