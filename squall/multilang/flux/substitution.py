"""Flux's substitution, done on the text before it is parsed: ``${name}`` from a properties
file (``--filter``), ``${ENV-NAME}`` from the environment (``--env-filter``), and
``${name[i]}`` for the i-th item of a property written as a list (``[a, b]``).

Unlike Flux, every ``${...}`` of a line is replaced (Flux takes the first), and a name that
an enabled substitution cannot resolve is an error naming the file and line (Flux logs a
warning and leaves the text). Substitutions that are not enabled leave the text as it is.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

from squall.multilang.flux.marked_yaml import FluxError

_VAR = re.compile(r"\$\{([^}\n]+)\}")
_INDEXED = re.compile(r"^(.+)\[(\d+)\]$")
_SEPARATOR = re.compile(r"(?<!\\)[=:\s]")


def parse_properties(text: str, file: str) -> dict[str, str]:
    """A Java ``.properties`` file: ``key=value``, ``key: value`` or ``key value`` lines,
    ``#``/``!`` comments, a trailing backslash continues a line, ``\\`` escapes."""
    out: dict[str, str] = {}
    logical: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip() if pending else raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if not pending:
            start = number
        backslashes = len(line) - len(line.rstrip("\\"))
        if backslashes % 2 == 1:
            pending += line[:-1]
            continue
        logical.append((start, pending + line))
        pending = ""
    if pending:
        logical.append((start, pending))
    for number, line in logical:
        match = _SEPARATOR.search(line)
        if match is None:
            key, value = line, ""
        else:
            key = line[:match.start()]
            value = line[match.end():].lstrip()
            if match.group().isspace() and value[:1] in ("=", ":"):
                value = value[1:].lstrip()
        key = _unescape(key, file, number)
        if not key:
            raise FluxError(file, number, "", "a property line without a key")
        out[key] = _unescape(value, file, number)
    return out


def _unescape(text: str, file: str, line: int) -> str:
    if "\\" not in text:
        return text
    out, i = [], 0
    simple = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise FluxError(file, line, "", f"bad unicode escape \\u{digits}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(simple.get(nxt, nxt))
        i += 2
    return "".join(out)


def _list_item(value: str, index: int) -> str | None:
    inner = value.strip()
    if not (inner.startswith("[") and inner.endswith("]")):
        return None
    items = [item.strip().strip('"').strip("'") for item in inner[1:-1].split(",")]
    return items[index] if index < len(items) else None


def substitute(text: str, file: str, properties: Mapping[str, str] | None,
               environ: Mapping[str, str] | None) -> str:
    """``text`` with its ``${...}`` replaced; ``properties``/``environ`` None means that
    substitution is off."""
    if properties is None and environ is None:
        return text
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if "${" not in line:
            continue

        def replace(match: re.Match[str], number: int = number) -> str:
            name = match.group(1)
            if name.startswith("ENV-"):
                if environ is None:
                    return match.group(0)
                value = environ.get(name[4:])
                if value is None:
                    raise FluxError(file, number, name, f"environment variable {name[4:]} is not set")
                return value
            if properties is None:
                return match.group(0)
            if name in properties:
                return properties[name]
            indexed = _INDEXED.match(name)
            if indexed and indexed.group(1) in properties:
                item = _list_item(properties[indexed.group(1)], int(indexed.group(2)))
                if item is not None:
                    return item
                raise FluxError(file, number, name, f"property {indexed.group(1)!r} has no item "
                                                    f"{indexed.group(2)} (write it as [a, b, ...])")
            raise FluxError(file, number, name, "no such property in the --filter file")

        lines[number - 1] = _VAR.sub(replace, line)
    return "\n".join(lines)
