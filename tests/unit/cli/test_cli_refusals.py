"""Commands that would do something surprising are refused before they reach nimbus."""
from __future__ import annotations

from click.testing import CliRunner

from squall.cli import main
from squall.cli.status_view import plural, render


def test_rebalance_without_a_change_is_refused() -> None:
    result = CliRunner().invoke(main, ["rebalance", "wordcount"])
    assert result.exit_code == 2
    assert "say what to change: -n WORKERS and/or -e COMPONENT=N" in result.output


def test_counts_agree_with_their_nouns() -> None:
    assert [plural(n, "worker") for n in (0, 1, 2, 1500)] == ["0 workers", "1 worker", "2 workers",
                                                              "1,500 workers"]
    status = {"name": "wc", "id": "wc-1-1", "status": "active", "workers": [{"host": "h", "port": 1}],
              "requested_workers": 1, "executors": 1, "uptime": 5, "components": [
                  {"id": "rows", "kind": "spout", "executors": [
                      {"executor": [1, 1], "host": "h", "port": 1, "uptime": 5}]}]}
    text = render(status)
    assert "1 worker (requested 1), 1 executor," in text and "1 executor " in text.splitlines()[2] + " "
