"""A multilang topology on a real cluster: `squall submit --flux` ships the pystorm script
its FluxShellBolt runs; workers run it from their code directory across two worker
processes; every sentence is acked and the word counts are exact."""
import collections
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

FOLDER = Path(__file__).resolve().parents[2] / "support" / "cluster_topologies"
FLUX = FOLDER / "ml_wordcount.yaml"


def reference(n):
    from support.cluster_topologies.cluster_wordcount import sentences

    return collections.Counter(w for s in sentences(n) for w in s.split())


def test_submit_flux_with_a_pystorm_bolt_gives_exact_counts(start_cluster, tmp_path):
    cluster = start_cluster(supervisors=1, slots=2)
    out = tmp_path / "out"
    out.mkdir()
    n = 300
    res = cluster.cli("submit", "--flux", str(FLUX), "-c", f"test.output.dir={out}",
                      "-c", f"test.sentences={n}")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "ml-wordcount" in res.stdout

    def acked():
        ids = set()
        for f in out.glob("acked-*.txt"):
            ids.update(int(x) for x in f.read_text().split())
        return ids

    cluster.wait_for(lambda: acked() == set(range(n)), 120, "every sentence acked")
    seen = {}
    for f in out.glob("words-*.txt"):
        for line in f.read_text().splitlines():
            sid, idx, word = line.split()
            seen[(int(sid), int(idx))] = word
    assert collections.Counter(seen.values()) == reference(n)
    assert len(cluster.worker_pids()) == 2
    res = cluster.cli("kill", "ml-wordcount", "--wait", "0")
    assert res.returncode == 0, res.stderr
    cluster.wait_for(lambda: cluster.worker_pids() == {}, 30, "workers gone")
    cluster.wait_for(lambda: not _children_running("split_sentence.py"), 30, "their shell children gone")


def _children_running(script):
    import psutil

    for p in psutil.process_iter(["cmdline"]):
        try:
            if script in " ".join(p.info["cmdline"] or []) and p.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            continue
    return False


def test_submit_refuses_a_bundle_without_the_script(tmp_path):
    folder = tmp_path / "topo"
    shutil.copytree(FOLDER, folder)
    (folder / "split_sentence.py").unlink()
    res = subprocess.run([sys.executable, "-m", "squall.cli", "submit", "--flux", str(folder / FLUX.name)],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 1
    assert "'split' runs 'split_sentence.py', which is not in the code bundle" in res.stderr


def test_run_flux_locally(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    res = subprocess.run([sys.executable, "-m", "squall.cli", "run", "--flux", str(FLUX),
                          "--local", "--duration", "8", "-c", f"test.output.dir={out}", "-c", "test.sentences=50",
                          "-c", "squall.log.level=WARNING"], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "ran ml-wordcount" in res.stdout and "acked 50" in res.stdout
