"""The WSGI side of one request (PEP 3333): the ``environ`` an application gets, and its
reply, ``start_response`` and the writes, made on the application's thread and carried out
on the server's event loop, each within a deadline. ``call`` runs an application on a
request: whatever it raises is a 500 (counted, logged within the bound), never a dead server.
"""
from __future__ import annotations

import asyncio
import http
import sys
import urllib.parse
from collections.abc import Callable, Iterable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from squall.daemons.http.body import PIECE, BodyError, BodyReader, InputStream
from squall.daemons.http.head import Head
from squall.daemons.http.refusals import Refusals
from squall.errors import SquallError

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class ClientGone(SquallError):
    """The reply could not be delivered; ``reason`` is the refusal counter it counts in."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def finish(done: asyncio.Future[None]) -> None:
    """Mark ``done`` (on the loop): the request's application has returned."""
    if not done.done():  # cancelled when the server stops
        done.set_result(None)


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("ascii")


def plain_reply(status: int, text: str) -> bytes:
    """A whole text/plain reply, for answers the server gives itself."""
    body = (text + "\n").encode("utf-8")
    return (_status_line(status) + b"Content-Type: text/plain; charset=utf-8\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("ascii") + body)


class Reply:
    """``start_response`` and the writes of one reply, on the application's thread. A write
    waits only while the connection's transport holds more than its high-water mark (the
    server's ``REPLY_BUFFER``), and then for at most ``timeout``; the whole reply must be
    taken within ``whole`` seconds of its first write (``deadline()``, which the server awaits
    on its loop once the application returned). The connection is kept for another request
    (``keep``) when the client allows it, the reply has a Content-Length it meets, and the
    request's body was read whole before the reply began."""

    def __init__(self, writer: asyncio.StreamWriter, loop: asyncio.AbstractEventLoop, timeout: float,
                 head_only: bool, body: BodyReader, keep_wanted: bool, whole: float = float("inf")) -> None:
        self._writer, self._loop, self._timeout, self._head_only = writer, loop, timeout, head_only
        self._whole = whole
        self._deadline: float | None = None  # on the loop's clock, set by the first write
        self._body, self._keep_wanted = body, keep_wanted
        self._status: str | None = None
        self._headers: list[tuple[str, str]] = []
        self._length: int | None = None  # the Content-Length declared
        self._written = 0
        self._keep = False
        self.sent = False

    @property
    def keep(self) -> bool:
        return self._keep and (self._head_only or self._written == self._length)

    def start_response(self, status: str, headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Callable[[bytes], None]:
        if exc_info is not None and self.sent:
            raise exc_info[1].with_traceback(exc_info[2])
        self._status, self._headers = status, list(headers)
        return self.write

    def write(self, data: bytes) -> None:
        if self._status is None:
            raise RuntimeError("the application wrote before start_response")
        if not self.sent:
            self.sent = True
            lengths = [v for k, v in self._headers if k.lower() == "content-length"]
            self._length = int(lengths[0]) if len(lengths) == 1 and lengths[0].isdigit() else None
            self._keep = self._keep_wanted and self._length is not None and self._body.done
            lines = [f"HTTP/1.1 {self._status}\r\n"]
            lines += [f"{k}: {v}\r\n" for k, v in self._headers if k.lower() != "connection"]
            lines.append("\r\n" if self._keep else "Connection: close\r\n\r\n")
            head = "".join(lines).encode("latin-1")
        else:
            head = b""
        if self._head_only:
            data = b""
        self._written += len(data)
        for start in range(0, max(len(data), 1), PIECE):  # the head goes with the first piece
            piece = head + data[start:start + PIECE]
            if piece:
                self._send(piece)
            head = b""

    def plain(self, status: int, text: str) -> None:
        """Answer ``status`` with ``text`` (only before anything was sent), and close."""
        self.sent = True
        self._keep = False
        self._send(plain_reply(status, text))

    def _send(self, data: bytes) -> None:
        try:
            future = asyncio.run_coroutine_threadsafe(self._drain(data), self._loop)
        except RuntimeError:  # the loop has closed
            raise ClientGone("reset", "the server stopped while replying") from None
        try:
            future.result(self._timeout + 5.0)
        except FutureTimeout:
            future.cancel()
            raise ClientGone("reply-timeout", f"the client did not take the reply within {self._timeout:g}s") from None
        except asyncio.CancelledError:
            raise ClientGone("reset", "the server stopped while replying") from None

    def deadline(self) -> float:
        """When the client must have taken the whole reply (the loop's clock; on the loop)."""
        if self._deadline is None:
            self._deadline = self._loop.time() + self._whole
        return self._deadline

    async def _drain(self, data: bytes) -> None:
        try:
            self._writer.write(data)
            async with asyncio.timeout_at(min(self.deadline(), self._loop.time() + self._timeout)):
                await self._writer.drain()
        except TimeoutError:
            self._writer.transport.abort()
            raise ClientGone("reply-timeout", f"the client did not take the reply within its deadline "
                                              f"({self._timeout:g}s a part, {self._whole:g}s in all)") from None
        except ConnectionError as exc:
            raise ClientGone("reset", f"the connection broke while replying: {exc}") from None


def environ_of(head: Head, stream: InputStream, server: tuple[str, int], remote: tuple[str, int],
               tls: bool) -> dict[str, Any]:
    """The WSGI environ of the request ``head``, its body read from ``stream``."""
    path, _, query = head.target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": head.method, "SCRIPT_NAME": "",
        "PATH_INFO": urllib.parse.unquote_to_bytes(path).decode("latin-1"), "QUERY_STRING": query,
        "SERVER_NAME": server[0], "SERVER_PORT": str(server[1]), "SERVER_PROTOCOL": head.version,
        "REMOTE_ADDR": remote[0], "REMOTE_PORT": str(remote[1]),
        "wsgi.version": (1, 0), "wsgi.url_scheme": "https" if tls else "http", "wsgi.input": stream,
        "wsgi.errors": sys.stderr, "wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False,
    }
    if tls:
        environ["HTTPS"] = "on"
    for name, value in head.fields:
        if "_" in name:  # would pass for the same name with "-" in HTTP_*: dropped, as nginx does
            continue
        key = name.upper().replace("-", "_")
        if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            environ[key] = value
            continue
        key = "HTTP_" + key
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def call(app: WSGIApp, environ: dict[str, Any], reply: Reply, refusals: Refusals) -> None:
    """Run ``app`` on ``environ``, replying through ``reply``."""
    where = {"remote": environ["REMOTE_ADDR"], "method": environ["REQUEST_METHOD"],
             "path": environ["PATH_INFO"][:200]}
    try:
        result = app(environ, reply.start_response)
        try:
            for data in result:
                reply.write(data)
            if not reply.sent:
                reply.write(b"")
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
    except ClientGone as exc:
        refusals.refuse(exc.reason, error=str(exc), **where)
    except BodyError as exc:  # the application let it through: answer it (the loop counts it)
        if not reply.sent:
            _last_words(reply, exc.status, str(exc))
    except Exception:  # noqa: BLE001 - the application's fault: a 500, never a dead server
        refusals.refuse("error", exc_info=True, **where)
        if not reply.sent:
            _last_words(reply, 500, "internal server error")


def _last_words(reply: Reply, status: int, text: str) -> None:
    try:
        reply.plain(status, text)
    except ClientGone:
        pass
