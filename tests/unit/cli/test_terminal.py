"""A topology's text on an admin's terminal: control characters escaped, text kept."""
from __future__ import annotations

import pytest

from squall.cli.status_view import render
from squall.cli.terminal import printable, shown

HOSTILE = "boom\x1b[2J\x1b]0;owned\x07\x1b]52;c;cm0gLXJmIH4=\x07\x9b31m\u202eevil\r\x00end"


@pytest.mark.parametrize("text, out", [
    ("plain text, ünïcode, 中文\n\tindented", "plain text, ünïcode, 中文\n\tindented"),
    ("\x1b[31mred", "\\x1b[31mred"),
    ("a\rb\x08c\x7fd", "a\\x0db\\x08c\\x7fd"),
    ("\x9b2J", "\\x9b2J"),                      # C1 CSI: one character, a whole escape on some terminals
    ("abc\u202edcba", "abc\\u202edcba"),        # a right-to-left override
])
def test_control_characters_are_escaped_and_text_kept(text, out):
    assert printable(text) == out
    assert shown(text, raw=True) == text


def test_nothing_a_terminal_acts_on_survives():
    out = printable(HOSTILE)
    assert not any(ord(c) < 0x20 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f for c in out)
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in out  # visible, not acted on


def test_the_status_screen_escapes_what_the_topology_wrote():
    status = {"name": "t", "id": "t-1", "status": "active", "workers": [], "requested_workers": 1, "executors": 1,
              "uptime": 5, "components": [{
                  "id": "bolt", "kind": "bolt", "executors": [{
                      "executor": [1, 1], "host": "h", "port": 6700, "uptime": 5,
                      "metrics": [{"task": 1, "name": "m\x1b]0;x\x07", "key": None, "value": "v\x1b[2J"}]}],
                  "last_error": {"time": 0, "task": 1, "host": "h", "port": 6700, "error": HOSTILE}}]}
    screen = shown(render(status))
    assert "\x1b" not in screen and "\x07" not in screen
    assert "m\\x1b]0;x\\x07 = v\\x1b[2J" in screen
