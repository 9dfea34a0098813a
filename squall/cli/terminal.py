"""Text a topology supplies (its errors, its log lines, its metric names and values), made
safe to print on a terminal: control characters are shown escaped (``\\x1b``), so an exception
message cannot clear an admin's screen, retitle the window, write the clipboard (OSC 52) or
hide text. Newlines and tabs stay. ``--raw`` prints the text as it came, for those who pipe it.
The web UI is safe already: it sets text, never markup.
"""
from __future__ import annotations

import re

import click

# C0 and C1 controls but tab and newline, DEL, and the bidirectional overrides and isolates
# (they reorder what is shown: "Trojan source").
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")

RAW = click.option("--raw", is_flag=True,
                   help="Print the topology's text as it came, control characters included "
                        "(by default they are shown escaped, e.g. \\x1b).")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character but newline and tab escaped."""
    return _UNSAFE.sub(_escape, text)


def shown(text: str, raw: bool = False) -> str:
    """What to print of ``text``: as it came with ``raw``, else ``printable``."""
    return text if raw else printable(text)


def echo(text: str, raw: bool = False, nl: bool = True) -> None:
    """Print ``text`` as ``shown`` says; with ``raw`` every byte (click would drop ANSI
    sequences on output that is not a terminal)."""
    click.echo(shown(text, raw), nl=nl, color=True if raw else None)
