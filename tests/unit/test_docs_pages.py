"""The docs as text: runnable blocks well formed, links that lead somewhere, generated pages
up to date, a short README, and every section of the old long README at home in docs/.
(The blocks themselves run in tests/cluster/test_docs.py.)"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from support.docs_blocks import REPO, blocks, pages

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text, inside = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside and line.startswith("#"):
            text.append(slug(line.lstrip("#")))
    return set(text)


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_blocks_are_well_formed_and_links_lead_somewhere(page: Path) -> None:
    blocks(page)  # raises on an unknown word or a malformed runnable block
    text = page.read_text(encoding="utf-8")
    for target in LINK.findall(re.sub(r"```.*?```", "", text, flags=re.S)):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.relative_to(REPO)} links to {target}: no such file"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page.relative_to(REPO)} links to {target}: no such heading"


def test_generated_pages_are_up_to_date() -> None:
    stale = [str(p.relative_to(REPO)) for p in gen_docs().stale()]
    assert not stale, f"stale generated docs {stale}: run `.venv/bin/python scripts/gen_docs.py`"


def test_the_configuration_reference_lists_every_key() -> None:
    import yaml

    page = (REPO / "docs" / "operations" / "configuration.md").read_text(encoding="utf-8")
    keys = yaml.safe_load((REPO / "conf" / "defaults.yaml").read_text(encoding="utf-8"))
    missing = [k for k in keys if f"| `{k}` |" not in page]
    assert not missing


def test_the_readme_is_a_front_page() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert 150 <= len(text.splitlines()) <= 250
    assert "scripts/quickstart.sh" in text and "`scripts/test.sh` runs everything" in text
    assert "source .venv/bin/activate" in text and ".venv/bin/squall" in text
    runnable = [b for b in blocks(REPO / "README.md") if b.runs]
    assert any("python" == b.lang and "file" in b.attrs for b in runnable), "a complete topology that runs"
    assert any("background" in b.attrs and "dev-cluster" in b.code for b in runnable)


def test_the_tutorial_reaches_a_secured_cluster_running_a_topology() -> None:
    steps = [b.code for b in blocks(REPO / "docs" / "tutorial.md") if b.runs]
    joined = "\n".join(steps)
    for step in ("scripts/quickstart.sh", "source .venv/bin/activate", "squall dev-cluster",
                 "squall submit", "squall status", "squall errors", "squall token add"):
        assert step in joined, step


# Where each section of the old README lives now: (page, a sentence it kept).
MOVED = {
    "Quick start": ("README.md", "Both are idempotent and fast on a second run"),
    "A topology": ("docs/guide/topologies.md", "`build()` validates and names the problem"),
    "Reliability": ("docs/internals.md", "44 random bits above 20 that"),
    "Flow control between workers": ("docs/internals.md", "A report\nnot renewed within 5 s stops counting"),
    "Hostile input": ("docs/operations/faults.md", "A bad group costs only itself"),
    "Executors and threads": ("docs/concepts.md", "for a thread per executor (Storm's model)"),
    "The command line": ("docs/guide/command-line.md", "squall token add --file F --user U --role R"),
    "Running a cluster": ("docs/operations/cluster.md", "Two nimbus processes may run"),
    "Faults the daemons ride out": ("docs/operations/faults.md", "Error reports wait in the worker (at most 100)"),
    "Nimbus HTTP API": ("docs/operations/cluster.md", "a standby nimbus answers writes with 503 naming the leader"),
    "Web UI": ("docs/operations/observability.md", "strict\nContent-Security-Policy"),
    "Worker logs": ("docs/operations/observability.md", "keeps the newest 100"),
    "Security / API": ("docs/operations/security.md", "constant time (`hmac.compare_digest`)"),
    "Supervisors' endpoints": ("docs/operations/security.md",
                               "Until a supervisor has received a table it refuses every caller"),
    "Code and local state": ("docs/operations/security.md",
                             "Nimbus refuses a hand-made\nbundle that carries a dotfile"),
    "ZooKeeper": ("docs/operations/security.md", "Storm's topology digest"),
    "Worker traffic": ("docs/operations/security.md", "`zmq.curve` is cluster-wide"),
    "Rotating API tokens and TLS keys": ("docs/operations/upgrades.md", "new TLS certificate and key in force"),
    "Rotating the ZooKeeper password": ("docs/operations/upgrades.md", "addauth digest squall:OLD_PASSWORD"),
    "Backfill on Spark": ("docs/guide/backfill.md", "maps groupings to partitioning"),
    "Same values as live": ("docs/guide/backfill.md", "a lone surrogate escape"),
    "Sinks keep types": ("docs/guide/backfill.md", "Nothing is widened"),
    "Progress": ("docs/guide/backfill.md", "tagged with the\nrun's random token"),
    "Backfill on a Spark cluster": ("docs/guide/backfill.md", "SparkContext.addPyFile"),
    "Windowed bolts": ("docs/guide/windows-and-state.md",
                       "Count windows in event time take tuples in\n  timestamp order"),
    "Stateful components": ("docs/guide/windows-and-state.md", "barrier alignment"),
    "On Spark": ("docs/guide/windows-and-state.md", "Window contents are not carried\nover"),
    "Benchmarks": ("docs/benchmarks.md", "cluster-submit-latency | 0.7 – 1.2 s"),
    "Recovery": ("docs/benchmarks.md", "worker SIGKILLed → its tasks process again"),
    "Where the time goes": ("docs/internals.md", "raises the cyclic GC threshold"),
    "Observability": ("docs/operations/observability.md", "squall_worker_dropped_total"),
    "Configuration": ("docs/operations/configuration.md", "topology.window.max.tuples"),
    "Layout": ("docs/internals.md", "the one package that talks to ZooKeeper"),
}


@pytest.mark.parametrize("section", sorted(MOVED))
def test_every_section_of_the_old_readme_has_a_home(section: str) -> None:
    page, sentence = MOVED[section]
    text = " ".join((REPO / page).read_text(encoding="utf-8").split())
    assert " ".join(sentence.split()) in text, f"{section}: not in {page}"


def test_nothing_points_outside_the_repository() -> None:
    """Design notes that lived beside the repository are not cited; Storm's sources are."""
    bad = []
    for top in ("README.md", "squall", "daemons", "messaging", "conf", "scripts", "docs", "examples", "bench"):
        root = REPO / top
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in files:
            if "__pycache__" in path.parts or path.suffix not in (".py", ".md", ".yaml", ".yml", ".sh", ".js"):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            if re.search(r"\bseeds?\s+00[0-3]\b|shared/seeds|\.\./shared/", text, flags=re.I):
                bad.append(str(path.relative_to(REPO)))
    assert not bad
