"""The docs pages whose runnable blocks need PySpark and Java (marked `spark`), run as
tests/cluster/test_docs.py runs the others."""
from __future__ import annotations

from pathlib import Path

import pytest

from support.docs_blocks import REPO, run_page, runnable_pages


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("page", runnable_pages(spark=True), ids=lambda p: str(p.relative_to(REPO)))
def test_page_runs(page: Path, tmp_path: Path) -> None:
    run_page(page, tmp_path)
