"""The web UI's static files, served by nimbus next to its API.

The UI is plain HTML, CSS and JavaScript in ``webui/`` (no build step, nothing fetched
from elsewhere); the browser reads the same JSON API as ``squall status --json``. Only
the files listed here are served: a path is looked up, never joined to a directory.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

# URL path -> (file in webui/, content type)
FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/ui/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/ui/graph.js": ("graph.js", "text/javascript; charset=utf-8"),
    "/ui/operate.js": ("operate.js", "text/javascript; charset=utf-8"),
    "/ui/style.css": ("style.css", "text/css; charset=utf-8"),
}

# Everything from nimbus itself; no inline script, no framing by other sites.
SECURITY_HEADERS = [
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "
                                "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
                                "base-uri 'none'; form-action 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-cache"),
]


@dataclass(frozen=True)
class StaticFile:
    data: bytes
    content_type: str


_cache: dict[str, StaticFile] = {}


def static_file(path: str) -> StaticFile | None:
    """The file served at ``path``, or None when the UI has no such file."""
    entry = FILES.get(path)
    if entry is None:
        return None
    name, content_type = entry
    cached = _cache.get(name)
    if cached is None:
        data = resources.files("squall.daemons.nimbus").joinpath("webui", name).read_bytes()
        cached = _cache[name] = StaticFile(data, content_type)
    return cached


def respond(start_response: Callable[..., Any], page: StaticFile, head: bool = False) -> list[bytes]:
    start_response("200 OK", [("Content-Type", page.content_type),
                              ("Content-Length", str(len(page.data))), *SECURITY_HEADERS])
    return [] if head else [page.data]
