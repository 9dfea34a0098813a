"""The daemons' HTTP(S) server: nimbus's API, a supervisor's ``/metrics`` and logviewer.

One event loop (asyncio, on a thread of its own) holds every connection: it accepts, does
the TLS handshake (``opening.py``), reads the request head and the body, each within its deadline
(:class:`~squall.daemons.http.limits.HttpLimits`), and hands complete heads to a small pool
of threads that run the WSGI application. A connection that is slow, idle or never starts
TLS costs the loop a socket and its buffers (about 300 KB with TLS), never a thread, so
hundreds of them do not hold up a real request; past ``max_connections`` in all, or
``max_connections_per_address`` from one address, new connections are closed at once
(``admission.py``).

A complete request waits on the loop until it may have a thread: one address runs at most a
quarter of them, and requests with a body leave a quarter to bodiless ones (``admission.py``).
A body must keep a minimum pace, and the whole request (head and body) and the whole reply
have deadlines (``limits.py``, ``body.Pace``). A reply is handed to the loop as the
application writes it, within a bound per connection (``REPLY_BUFFER``): the thread goes back
to the pool while the loop sends it, and the next request on the connection waits until the
client took the reply. Memory freed by closed connections is given back to the system
(``give_back``) once many have closed, so a flood does not leave the process at its peak.

Why not cheroot, which served before (measured, see docs/operations/security.md): cheroot
does the TLS handshake on its one accepting thread, so each silent TCP connection stopped
every new connection for its socket timeout; and it gives each new connection a pool thread
that waits for the head with only a per-recv timeout, so a client sending one header byte
every few seconds held a thread for as long as it liked. Neither is a setting. The standard
library's ``asyncio`` gives handshake deadlines (``ssl_handshake_timeout``) and thousands of
idle sockets for free; the HTTP/1.1 framing squall needs is small and lives in ``head.py``
and ``body.py``, strict and tested without sockets.

A connection serves up to ``MAX_REQUESTS`` requests one after another (HTTP/1.1 keep-alive,
while replies have a length and bodies were read whole); an idle one is closed quietly after
``header_secs``. Refusals (a failed or
late handshake, a late or malformed head, a body too slow or too large, a full server, a
client gone mid-request) are answered where HTTP allows, counted by reason and logged within
a bound (:class:`~squall.daemons.http.refusals.Refusals`); none gets a traceback.
"""
from __future__ import annotations

import asyncio
import queue
import socket
import threading
from collections.abc import Callable
from typing import Any

from squall.daemons.http.admission import Admission, address_key
from squall.daemons.http.body import BodyReader, InputStream, Pace
from squall.daemons.http.head import Head, HeadError, framing, keeps_alive, parse_head
from squall.daemons.http.limits import HttpLimits
from squall.daemons.http.memory import give_back
from squall.daemons.http.opening import open_streams
from squall.daemons.http.refusals import Refusals
from squall.daemons.http.tls_material import TlsMaterial
from squall.daemons.http.wsgi import Reply, WSGIApp, call, environ_of, finish, plain_reply

DEFAULT_LIMITS = HttpLimits()
BACKLOG = 1024
LINGER_BYTES = 1 << 20  # of a body the app did not read, drained before closing (so the reply survives)
LINGER_SECS = 2.0
CLOSE_SECS = 2.0        # for a TLS close to finish before the connection is cut
MAX_REQUESTS = 1000     # on one connection
REPLY_BUFFER = 256 * 1024  # of a reply the loop holds for a client before the application's thread waits
GIVE_BACK_SECS = 5.0       # how often to look whether connections closed since memory was last given back
GIVE_BACK_AFTER = 64       # so many: give it back, unless it was given back within GIVE_BACK_EARLIEST
GIVE_BACK_EARLIEST = 4     # looks (20 s): a full collection costs the whole process a pause
GIVE_BACK_LATEST = 12      # looks (a minute) after which any closed connection is enough


class HttpServer:
    """Binds on construction (OSError when it cannot); ``start()`` serves on a thread of its
    own, ``stop()`` closes every connection and ends the threads. ``tls`` (certificate and key,
    read again when they change) makes it HTTPS only. ``max_body`` is a backstop: applications
    read bodies against their own, smaller limits."""

    def __init__(self, app: WSGIApp, host: str, port: int, *, max_body: int, refusals: Refusals,
                 limits: HttpLimits = DEFAULT_LIMITS, tls: TlsMaterial | None = None,
                 name: str = "squall", threads: int = 8) -> None:
        self._app, self.limits, self.refusals, self._tls = app, limits, refusals, tls
        self._max_body = max_body
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        self._sock = socket.create_server((host, port), family=family, backlog=BACKLOG)
        self._sock.setblocking(False)
        self.host, self.port = host, int(self._sock.getsockname()[1])
        self.tls = tls is not None
        self._loop = asyncio.new_event_loop()
        self._conns: set[asyncio.Task[None]] = set()
        self.admission = Admission(limits.max_connections, limits.max_connections_per_address, threads)
        self._turn: asyncio.Condition | None = None  # a request finished: another may have its thread
        self._closed_since_give_back = 0
        self._stopping: asyncio.Event | None = None
        self._stop_wanted = False
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._workers = [threading.Thread(target=self._work, name=f"{name}-http-{i}", daemon=True)
                         for i in range(threads)]
        self._thread = threading.Thread(target=self._run, name=f"{name}-http", daemon=True)

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        for worker in self._workers:
            worker.start()
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._request_stop)
            self._thread.join(timeout)
        for _ in self._workers:
            self._jobs.put(None)
        self._sock.close()

    def _request_stop(self) -> None:
        self._stop_wanted = True  # it may come before _serve made the event
        if self._stopping is not None:
            self._stopping.set()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.set_exception_handler(self._loop_error)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """What asyncio would print (a transport failing outside any await): counted and
        logged within the bound like any other failure."""
        exc = context.get("exception")
        self.refusals.refuse("error", error=str(context.get("message", ""))[:300],
                             exc_info=(type(exc), exc, exc.__traceback__) if exc is not None else False)

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        self._turn = asyncio.Condition()
        if self._stop_wanted:
            self._stopping.set()
        accepting = asyncio.create_task(self._accept())
        giving_back = asyncio.create_task(self._give_back_memory())
        await self._stopping.wait()
        accepting.cancel()
        giving_back.cancel()
        for task in list(self._conns):
            task.cancel()
        await asyncio.wait([accepting, giving_back, *self._conns], timeout=CLOSE_SECS)

    async def _give_back_memory(self) -> None:
        """Once many connections have closed (or some, a minute ago), hand the memory they freed
        back to the system (glibc keeps freed heap otherwise: a flood of 500 large heads left
        nimbus 550 MB up)."""
        looks = GIVE_BACK_EARLIEST
        while True:
            await asyncio.sleep(GIVE_BACK_SECS)
            looks += 1
            closed = self._closed_since_give_back
            if closed and (looks >= GIVE_BACK_LATEST or closed >= GIVE_BACK_AFTER and looks >= GIVE_BACK_EARLIEST):
                self._closed_since_give_back, looks = 0, 0
                give_back()

    # -- connections -----------------------------------------------------------------------
    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, addr = await loop.sock_accept(self._sock)
            except OSError as exc:  # out of file descriptors, say: wait for some to close
                self.refusals.refuse("capacity", error=f"accept failed: {exc}")
                await asyncio.sleep(0.1)
                continue
            key = address_key(str(addr[0]))
            refused = self.admission.connect(key)
            if refused is not None:
                limit = (f"{self.limits.max_connections} connections open already" if refused == "capacity" else
                         f"{self.limits.max_connections_per_address} connections from {key} open already")
                self.refusals.refuse(refused, remote=addr[0], error=limit)
                sock.close()
                continue
            # Small writes at once (asyncio sets this only on sockets made with proto 6): with
            # Nagle, a reply waits behind the TLS session tickets for the client's delayed ACK.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = loop.create_task(self._connection(sock, addr, key))
            self._conns.add(task)
            task.add_done_callback(self._conns.discard)

    async def _connection(self, sock: socket.socket, addr: tuple[Any, ...], key: str) -> None:
        remote = str(addr[0])
        writer: asyncio.StreamWriter | None = None
        try:
            streams = await open_streams(sock, remote, self._tls, self.limits, self.refusals)
            if streams is not None:
                reader, writer = streams
                writer.transport.set_write_buffer_limits(high=REPLY_BUFFER)
                await self._exchange(reader, writer, remote, int(addr[1]), key)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a fault in one connection must not end the server
            self.refusals.refuse("error", remote=remote, exc_info=True)
        finally:
            self.admission.disconnect(key)
            self._closed_since_give_back += 1
            if writer is not None:
                await self._close(writer)
            else:
                sock.close()

    async def _close(self, writer: asyncio.StreamWriter) -> None:
        writer.close()
        try:
            async with asyncio.timeout(CLOSE_SECS):
                await writer.wait_closed()
        except (TimeoutError, OSError):
            writer.transport.abort()

    # -- requests --------------------------------------------------------------------------
    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, remote: str,
                        remote_port: int, key: str) -> None:
        """Serve requests on one connection until one of them ends it."""
        for served in range(MAX_REQUESTS):
            got = await self._read_head(reader, writer, remote, idle_first=served > 0)
            if got is None:
                return
            head, began = got
            if not await self._request(head, began, reader, writer, remote, remote_port, key):
                return

    async def _request(self, head: Head, began: float, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       remote: str, remote_port: int, key: str) -> bool:
        """Run one request through the application; whether the connection may serve another.
        ``began``: when its first byte came (the whole request's deadline counts from it)."""
        try:
            frame = framing(head)
        except HeadError as exc:
            await self._refuse_head(writer, exc, remote)
            return False
        loop = asyncio.get_running_loop()
        limits = self.limits
        deadline = began + limits.request_secs
        pace = Pace(grace=limits.body_read_secs, min_rate=limits.body_min_rate, deadline=deadline)
        body = BodyReader(reader, frame, self._max_body, self._continuer(head, writer), pace)
        stream = InputStream(body, loop, limits.body_read_secs)
        reply = Reply(writer, loop, limits.body_read_secs, head.method == "HEAD", body, keeps_alive(head),
                      limits.reply_secs)
        environ = environ_of(head, stream, (self.host, self.port), (remote, remote_port), self.tls)
        path = environ["PATH_INFO"][:200]
        with_body = not frame.empty
        if not await self._take_turn(key, with_body, deadline):
            self.refusals.refuse("request-timeout", remote=remote, method=head.method, path=path,
                                 error=f"no free thread within the request's {limits.request_secs:g}s")
            await self._answer(writer, 503, "the server is busy: try again")
            return False
        done: asyncio.Future[None] = loop.create_future()
        try:
            self._jobs.put((environ, reply, done))
            await done
        finally:
            await self._end_turn(key, with_body)
        if stream.error is not None:
            self.refusals.refuse(stream.error.reason, error=str(stream.error), remote=remote, method=head.method,
                                 path=path)
            return False
        if not await self._delivered(reply, writer, remote, head.method, path):
            return False
        if reply.keep:
            return True
        if not body.done and not body.held_back:  # the reply did not need the body: drop some of it,
            # so that the close does not reset the connection under the reply
            try:
                async with asyncio.timeout(LINGER_SECS):
                    await body.discard(LINGER_BYTES)
            except TimeoutError:
                pass
        return False

    async def _take_turn(self, key: str, with_body: bool, deadline: float) -> bool:
        """Wait (on the loop, holding no thread) until the admission lets this request run;
        False when ``deadline`` came first."""
        assert self._turn is not None
        try:
            async with asyncio.timeout_at(deadline), self._turn:
                await self._turn.wait_for(lambda: self.admission.may_run(key, with_body))
                self.admission.run(key, with_body)
                return True
        except TimeoutError:
            return False

    async def _end_turn(self, key: str, with_body: bool) -> None:
        assert self._turn is not None
        async with self._turn:
            self.admission.ran(key, with_body)
            self._turn.notify_all()

    async def _delivered(self, reply: Reply, writer: asyncio.StreamWriter, remote: str, method: str,
                         path: str) -> bool:
        """Wait, on the loop, until the client took the reply down to the transport's low-water
        mark, within the reply's deadline; False (the connection aborted) when it did not."""
        try:
            async with asyncio.timeout_at(reply.deadline()):
                await writer.drain()
            return True
        except TimeoutError:
            self.refusals.refuse("reply-timeout", remote=remote, method=method, path=path,
                                 error=f"the client did not take the reply within {self.limits.reply_secs:g}s")
        except ConnectionError:
            pass
        writer.transport.abort()
        return False

    async def _read_head(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, remote: str,
                         idle_first: bool = False) -> tuple[Head, float] | None:
        """The next request's head, within its deadline, and when it began; None when there is
        none to serve. With ``idle_first`` (a kept connection) the client may first stay silent
        for as long, and is then closed quietly: an idle connection is not a refusal."""
        first = b""
        began = asyncio.get_running_loop().time()
        if idle_first:
            try:
                async with asyncio.timeout(self.limits.header_secs):
                    first = await reader.readexactly(1)
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                return None
            began = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(self.limits.header_secs):
                data = first + await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            self.refusals.refuse("header-timeout", remote=remote,
                                 error=f"no complete request head within {self.limits.header_secs:g}s")
            await self._answer(writer, 408, f"request head not complete within {self.limits.header_secs:g}s")
            return None
        except asyncio.LimitOverrunError:
            await self._refuse_head(writer, HeadError(431, f"request head above {self.limits.max_header_bytes} bytes"),
                                    remote)
            return None
        except asyncio.IncompleteReadError as exc:
            if first or exc.partial:  # an empty one is a client that opened a connection and did not use it
                self.refusals.refuse("reset", remote=remote,
                                     error="connection closed in the middle of the request head")
            return None
        except ConnectionError as exc:
            self.refusals.refuse("reset", remote=remote, error=f"connection reset in the request head: {exc}")
            return None
        try:
            return parse_head(data), began
        except HeadError as exc:
            await self._refuse_head(writer, exc, remote)
            return None

    async def _refuse_head(self, writer: asyncio.StreamWriter, exc: HeadError, remote: str) -> None:
        self.refusals.refuse("too-large" if exc.status == 431 else "malformed", remote=remote, status=exc.status,
                             error=str(exc))
        await self._answer(writer, exc.status, str(exc))

    async def _answer(self, writer: asyncio.StreamWriter, status: int, text: str) -> None:
        """The server's own short answer; a client that does not take it is not waited for."""
        try:
            writer.write(plain_reply(status, text))
            async with asyncio.timeout(1.0):
                await writer.drain()
        except (TimeoutError, ConnectionError):
            writer.transport.abort()

    @staticmethod
    def _continuer(head: Head, writer: asyncio.StreamWriter) -> Callable[[], Any] | None:
        """``Expect: 100-continue``: the client waits for a go before sending the body, which it
        gets only once the application reads it (after authentication and permission)."""
        if head.version != "HTTP/1.1" or (head.get("expect") or "").lower() != "100-continue":
            return None

        async def go_on() -> None:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return go_on

    # -- the application's threads ---------------------------------------------------------
    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            environ, reply, done = job
            try:
                call(self._app, environ, reply, self.refusals)
            finally:
                try:
                    self._loop.call_soon_threadsafe(finish, done)
                except RuntimeError:  # the loop has closed: the server is stopping
                    pass
