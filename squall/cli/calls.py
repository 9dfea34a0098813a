"""One way for client commands to call nimbus: its refusals and errors become a one-line
``Failure`` (exit code 1) with the text made safe for a terminal."""
from __future__ import annotations

from typing import Any

from squall.cli.terminal import printable
from squall.command_line import Failure
from squall.daemons.nimbus.client import NimbusError


def nimbus_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a client call; nimbus errors become a one-line Failure (exit code 1)."""
    try:
        return fn(*args, **kwargs)
    except NimbusError as exc:
        raise Failure(printable(str(exc))) from None
