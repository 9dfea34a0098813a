"""Docs that cannot rot: every block the README and docs/ mark runnable, run in order per
page in a fresh copy of the repository, as a reader would (see support.docs_blocks). Pages
that need Spark run in tests/spark/test_docs_spark.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from support.docs_blocks import REPO, run_page, runnable_pages


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", runnable_pages(spark=False), ids=lambda p: str(p.relative_to(REPO)))
def test_page_runs(page: Path, tmp_path: Path) -> None:
    run = run_page(page, tmp_path)
    for bg in run.background:  # Ctrl-C stopped each long-running command, promptly
        assert bg.stop_secs is not None and bg.stop_secs < 10, (bg.block.where, bg.stop_secs)
