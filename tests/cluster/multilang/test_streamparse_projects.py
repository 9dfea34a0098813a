"""streamparse projects as streamparse makes and runs them: a `sparse quickstart` project runs
unchanged with `squall run`, and a topology's Python components give the same results
in-process as through multilang children."""
import os
import shutil
import subprocess
import sys

from squall import LocalCluster, TopologyBuilder
from squall.multilang import streamparse_topology
from squall.multilang.codedir import CODE_DIR_ENV
from squall.testing.components import RecordingBolt
from squall.testing.waiting import wait_for
from support.multilang.harness import SUPPORT

SP_PROJECT = SUPPORT / "sp_project"


def squall(*args, cwd):
    return subprocess.run([sys.executable, "-m", "squall.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_sparse_quickstart_project_runs_unchanged(tmp_path):
    sparse = shutil.which("sparse", path=os.path.dirname(sys.executable)) or shutil.which("sparse")
    assert sparse, "streamparse's sparse command is missing (the test extra installs it)"
    made = subprocess.run([sparse, "quickstart", "wordcount"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "LEIN_ROOT": "1"}, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    project = tmp_path / "wordcount"
    for mode in ("in-process", "multilang"):
        res = squall("run", "topologies/wordcount.py", "--local", "--duration", "4",
                     "-c", f"topology.streamparse.mode={mode}", "-c", "squall.log.level=WARNING", cwd=project)
        assert res.returncode == 0, res.stdout + res.stderr
        emitted = int(res.stdout.split("spouts emitted ")[1].split(",")[0])
        assert emitted > 50, (mode, res.stdout)


def run_project(mode, names, monkeypatch):
    """The test project's word count in ``mode``, with a recorder on the counter's output."""
    monkeypatch.setenv(CODE_DIR_ENV, str(SP_PROJECT))
    monkeypatch.syspath_prepend(str(SP_PROJECT / "src"))
    monkeypatch.syspath_prepend(str(SP_PROJECT / "topologies"))
    import finite_wc

    builder = TopologyBuilder()
    conf = streamparse_topology.declare(builder, finite_wc.FiniteWordCount,
                                        {"topology.streamparse.mode": mode})
    builder.set_bolt("rec", RecordingBolt(names(mode))).shuffle("count")
    conf.pop("topology.worker.childopts", None)
    with LocalCluster({"squall.log.level": "WARNING", "topology.subprocess.timeout.secs": 20}) as c:
        c.submit("t", {**conf, "test.words": 600}, builder.build())
        wait_for(lambda: len(names.get(mode)) == 600, 90, f"600 counts ({mode})", lambda: str(c.errors("t")))
        wait_for(lambda: next(s for s in c.stats("t") if s["component"] == "words")["acked"] == 600, 60,
                 "every word acked")
        errors = c.errors("t")
        c.kill("t")
    assert errors == {}
    return sorted(tuple(v) for *_, v in names.get(mode))


def test_in_process_and_multilang_give_the_same_results(names, monkeypatch):
    in_process = run_project("in-process", names, monkeypatch)
    multilang = run_project("multilang", names, monkeypatch)
    assert in_process == multilang
    assert len(in_process) == 600 and ("dog", 1) in in_process
