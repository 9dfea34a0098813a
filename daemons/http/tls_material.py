"""TLS contexts built from files and built again when the files change, so that a new
certificate or CA needs no restart: an API server's certificate and key
(:class:`~squall.daemons.http.server.HttpServer`), a client's CA file
(:class:`~squall.daemons.nimbus.access.ApiAccess`).

A new context only serves connections made after it (a context is fixed for a connection at
its handshake); open connections keep theirs. Changed files that cannot be used (garbage, a
key that does not match the certificate, a half-written file) are logged and counted, and the
context in force stays: a bad edit never stops a daemon serving.
"""
from __future__ import annotations

import os
import re
import ssl
import stat
import threading
from collections.abc import Callable, Iterable

import structlog

from squall.daemons.file_watch import RELOAD_CHECK_SECS, FileWatch
from squall.daemons.metrics.families import Series
from squall.daemons.timers import SYSTEM_CLOCK, Clock
from squall.errors import SquallError

log = structlog.get_logger("squall.tls")

MAX_PEM_BYTES = 1 << 20  # a certificate chain or key is a few KiB
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.+?\r?\n-----END \1-----", re.DOTALL)


class TlsMaterialError(SquallError, ValueError):
    """TLS files cannot be used; the message names the file and the problem."""


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """A server context presenting ``cert`` (PEM, the chain may follow) with ``key``
    (unencrypted PEM), TLS 1.2 at least."""
    if "CERTIFICATE" not in _pem_labels(cert, "certificate"):
        raise TlsMaterialError(f"certificate file {cert} holds no complete PEM certificate")
    labels = _pem_labels(key, "key")
    if any("ENCRYPTED" in label for label in labels):
        raise TlsMaterialError(f"key file {key} holds an encrypted key: the server needs it unencrypted "
                               "(readable by its owner only)")
    if not any(label.endswith("PRIVATE KEY") for label in labels):
        raise TlsMaterialError(f"key file {key} holds no complete PEM private key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        # A password callable, so that OpenSSL never prompts on a terminal for one.
        context.load_cert_chain(cert, key, password=lambda: b"")
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            raise TlsMaterialError(f"key file {key} does not belong to certificate file {cert}") from None
        bad = f"certificate file {cert}" if not _certificates_parse(cert) else f"key file {key}"
        raise TlsMaterialError(f"{bad} cannot be parsed (a damaged PEM block?): {exc}") from None
    except OSError as exc:
        raise TlsMaterialError(f"cannot read certificate file {cert} or key file {key}: "
                               f"{exc.strerror or exc}") from None
    return context


def _certificates_parse(path: str) -> bool:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except (OSError, ValueError):  # ssl.SSLError is an OSError
        return False
    return True


def _pem_labels(path: str, what: str) -> list[str]:
    """The labels of the complete PEM blocks in ``path`` (``CERTIFICATE``, ``PRIVATE KEY``...)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block the accepting thread
            raise TlsMaterialError(f"{what} file {path} is not a regular file")
        if st.st_size > MAX_PEM_BYTES:
            raise TlsMaterialError(f"{what} file {path} is larger than {MAX_PEM_BYTES} bytes")
        with open(path, "rb") as f:
            data = f.read(MAX_PEM_BYTES + 1)
    except OSError as exc:
        raise TlsMaterialError(f"cannot read {what} file {path}: {exc.strerror or exc}") from None
    return [m.group(1).decode() for m in _PEM_BLOCK.finditer(data)]


class TlsMaterial:
    """The context ``build`` makes from ``files``: built at start (its error raised to the
    caller), and again once the files change (looked at, at most every ``period`` seconds,
    when ``context()`` is called). ``loaded`` and ``refused`` count the changes put in force
    and those that could not be used."""

    def __init__(self, files: Iterable[str | os.PathLike[str]], build: Callable[[], ssl.SSLContext],
                 what: str, clock: Clock = SYSTEM_CLOCK, period: float = RELOAD_CHECK_SECS) -> None:
        self.files = tuple(str(f) for f in files)
        self.what = what
        self._build = build
        self._watch = FileWatch(self.files, period, clock)  # stamped before the first build
        self._context = build()
        self.loaded = 0
        self.refused = 0
        self._lock = threading.Lock()

    def context(self) -> ssl.SSLContext:
        """The context in force, built again first if the files have changed."""
        with self._lock:
            if self._watch.changed():
                self._rebuild()
            return self._context

    def _rebuild(self) -> None:
        try:
            context = self._build()
        except (ValueError, OSError) as exc:  # TlsMaterialError, AccessError, an unexpected ssl.SSLError
            self.refused += 1
            log.error(f"{self.what} changed but cannot be used; the material read before stays in force",
                      files=list(self.files), error=str(exc))
            return
        self._context = context
        self.loaded += 1
        log.info(f"new {self.what} in force", files=list(self.files))

    def series(self) -> Series:
        """``squall_tls_reloads``: changes put in force and refused."""
        out = Series()
        out.add("squall_tls_reloads", ("loaded",), self.loaded)
        out.add("squall_tls_reloads", ("refused",), self.refused)
        return out
