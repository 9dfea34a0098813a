"""What every command line shares (the ``squall`` CLI's commands and the daemons' mains): the
``-c``/``--log-format`` options, configuration loading with CLI-shaped errors, and the failure
type (exit code 1). It sits below the daemons so that their mains need nothing from the CLI."""
from __future__ import annotations

from typing import Any

import click

from squall import config as _config
from squall.errors import SquallError

LOG_FORMAT = click.option("--log-format", type=click.Choice(["console", "json"]), default=None,
                          help="Log as readable lines (console) or JSON lines.")
OVERRIDES = click.option("-c", "overrides", multiple=True, metavar="KEY=VALUE",
                         help="Configuration override; repeatable.")


class Failure(SquallError, click.ClickException):
    """A command that could not do its job: exit code 1 with the reason."""

    exit_code = 1


def parse_overrides(pairs: tuple[str, ...]) -> dict[str, Any]:
    try:
        return _config.parse_overrides(pairs)
    except _config.ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="-c") from None


def base_config(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Defaults, the user file and ``overrides``; a bad file or key is a Failure."""
    try:
        return _config.build_config(overrides)
    except _config.ConfigError as exc:
        raise Failure(str(exc)) from None
