"""How a client reaches nimbus's API, from its config: the bearer token it presents and the
TLS context that verifies nimbus (the CLI, supervisors' downloads, a standby's code sync).

- token: ``squall.token``, else the ``SQUALL_TOKEN`` environment variable (``build_config``
  puts ``$SQUALL_TOKEN`` over the user file's ``squall.token``, and ``-c`` over both);
- TLS: on when ``nimbus.tls.ca.file`` is set; nimbus's certificate must chain to that CA
  (the file may hold several, e.g. the old and the new during a rotation) and name the host
  the client dials (``nimbus.host``).
"""
from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from squall.config import TOKEN_ENV
from squall.daemons.http.tls_material import TlsMaterial
from squall.daemons.timers import SYSTEM_CLOCK, Clock
from squall.errors import SquallError


class AccessError(SquallError, ValueError):
    """The client's security settings cannot be used (e.g. an unreadable CA file)."""


@dataclass(frozen=True)
class ApiAccess:
    """``trust`` is the CA file's context, read again when the file changes (checked at most
    every few seconds), so a long-lived client (a supervisor, a standby nimbus) follows a CA
    rotation without a restart."""

    token: str | None = None
    trust: TlsMaterial | None = None

    @property
    def ca_file(self) -> str | None:
        return self.trust.files[0] if self.trust is not None else None

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The context to dial nimbus with (the CA file's latest usable content); None for HTTP."""
        return self.trust.context() if self.trust is not None else None

    @property
    def scheme(self) -> str:
        return "https" if self.trust is not None else "http"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], clock: Clock = SYSTEM_CLOCK) -> ApiAccess:
        """AccessError when the CA file cannot be used now; later changes that cannot be
        used are logged and the CA read before stays in force."""
        token = conf.get("squall.token") or os.environ.get(TOKEN_ENV) or None
        ca = conf.get("nimbus.tls.ca.file")
        trust = TlsMaterial([ca], lambda: client_context(ca), "CA file (nimbus.tls.ca.file)", clock) if ca else None
        return cls(token=token, trust=trust)

    def explain(self, exc: BaseException, address: str) -> str | None:
        """A clear line for a TLS failure talking to ``address``, or None if ``exc`` is not one."""
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ssl.SSLCertVerificationError):
            return (f"the TLS certificate of nimbus at {address} is not trusted: "
                    f"{reason.verify_message or reason} (checked against nimbus.tls.ca.file {self.ca_file})")
        if isinstance(reason, ssl.SSLError):
            if "WRONG_VERSION_NUMBER" in str(reason) or "wrong version number" in str(reason):
                return (f"nimbus at {address} does not speak TLS, but nimbus.tls.ca.file is set: "
                        "configure nimbus.tls.cert.file and nimbus.tls.key.file on nimbus, or unset the CA")
            return f"TLS with nimbus at {address} failed: {reason}"
        return None


def client_context(ca_file: str) -> ssl.SSLContext:
    """A context that trusts only ``ca_file`` and checks the host name."""
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise AccessError(f"cannot load nimbus.tls.ca.file {ca_file}: {exc}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def server_tls_files(conf: Mapping[str, Any], daemon: str = "nimbus") -> tuple[str, str] | None:
    """(certificate, key) when ``daemon`` (nimbus or supervisor) serves TLS; None when neither
    ``DAEMON.tls.cert.file`` nor ``DAEMON.tls.key.file`` is set. Setting only one is an error:
    a half-configured server must not fall back to clear text."""
    cert, key = conf.get(f"{daemon}.tls.cert.file"), conf.get(f"{daemon}.tls.key.file")
    if not cert and not key:
        return None
    if not cert or not key:
        raise AccessError(f"{daemon}.tls.cert.file and {daemon}.tls.key.file must be set together")
    return str(cert), str(key)
