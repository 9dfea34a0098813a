"""Security material for a cluster, made in one call: a token file with an admin and a
supervisor token, and a private CA with a nimbus certificate for the API's TLS and a
supervisor certificate for the supervisors' /metrics and logviewer; and the
daemons' ZooKeeper credential (``daemon_auth_conf``, made apart: it must outlive the rest).

``squall dev-cluster``, ``squall secure-init`` (the compose setup) and the test harnesses
use it, so that every cluster they start is secured. Certificates are made with the
``openssl`` command (Debian's ``openssl`` package), which keeps a large crypto library out
of squall's dependencies. Everything is written readable by its owner only.
"""
from __future__ import annotations

import base64
import hashlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from ipaddress import ip_address
from pathlib import Path
from typing import Any

from squall.daemons.nimbus.auth import add_token
from squall.errors import SquallError

DAEMON_USER = "squall"  # the daemons' ZooKeeper digest user (conf/compose.yaml names it too)
# The files ``create`` writes in its directory.
TOKENS_FILE, CA_CERT, CA_KEY, NIMBUS_CERT, NIMBUS_KEY = "tokens.yaml", "ca.crt", "ca.key", "nimbus.crt", "nimbus.key"
SUPERVISOR_CERT, SUPERVISOR_KEY = "supervisor.crt", "supervisor.key"
CERT_DAYS = 825
CA_DAYS = 3650
OPENSSL_TIMEOUT = 30.0
_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


class CredentialsError(SquallError, RuntimeError):
    """Material could not be made (e.g. no openssl command); the message says why."""


@dataclass
class ClusterCredentials:
    """Where the material lives and the two tokens it made (stored nowhere else in clear
    except the config files written from ``*_conf``)."""

    directory: Path
    tokens_file: Path
    admin_token: str
    supervisor_token: str
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    supervisor_cert_file: Path | None = None
    supervisor_key_file: Path | None = None
    extra_tokens: dict[str, str] = field(default_factory=dict)  # user -> token

    def _tls_client(self) -> dict[str, Any]:
        return {"nimbus.tls.ca.file": str(self.ca_file)} if self.ca_file else {}

    def nimbus_conf(self) -> dict[str, Any]:
        """Nimbus: its tokens and certificate, plus the supervisor token for a standby's code sync."""
        conf = {"nimbus.auth.enabled": True, "nimbus.auth.tokens.file": str(self.tokens_file),
                "squall.token": self.supervisor_token, **self._tls_client()}
        if self.cert_file and self.key_file:
            conf.update({"nimbus.tls.cert.file": str(self.cert_file), "nimbus.tls.key.file": str(self.key_file)})
        return conf

    def supervisor_conf(self) -> dict[str, Any]:
        """Supervisors: the token for bundle downloads, the CA, and their own certificate."""
        conf = {"squall.token": self.supervisor_token, **self._tls_client()}
        if self.supervisor_cert_file and self.supervisor_key_file:
            conf.update({"supervisor.tls.cert.file": str(self.supervisor_cert_file),
                         "supervisor.tls.key.file": str(self.supervisor_key_file)})
        return conf

    def client_conf(self, token: str | None = None) -> dict[str, Any]:
        return {"squall.token": token or self.admin_token, **self._tls_client()}

    def nimbus_spki(self) -> str:
        """base64 sha256 of nimbus's public key (what a browser can be told to trust)."""
        if self.cert_file is None:
            raise CredentialsError("no TLS material was made")
        pem = _openssl_out("x509", "-in", self.cert_file, "-pubkey", "-noout")
        der = _openssl_out("pkey", "-pubin", "-outform", "der", stdin=pem)
        return base64.b64encode(hashlib.sha256(der).digest()).decode()

    def add_user(self, user: str, role: str) -> str:
        """A new token for ``user`` in ``role`` (nimbus reads the token file at start)."""
        token = add_token(self.tokens_file, user, role)
        self.extra_tokens[user] = token
        return token


def daemon_auth_conf(user: str = DAEMON_USER) -> dict[str, str]:
    """A fresh daemons' ZooKeeper credential (a long random password) as config keys."""
    return {"zookeeper.auth.user": user, "zookeeper.auth.password": secrets.token_urlsafe(24)}


def create(directory: str | os.PathLike[str], hosts: Iterable[str] = ("127.0.0.1", "localhost"),
           tls: bool = True, supervisor_hosts: Iterable[str] | None = None) -> ClusterCredentials:
    """Make tokens (and, with ``tls``, a CA, a nimbus certificate valid for ``hosts`` and a
    supervisor certificate valid for ``supervisor_hosts``, default ``hosts``) in
    ``directory``; files already there are replaced."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    tokens_file = directory / TOKENS_FILE
    tokens_file.unlink(missing_ok=True)
    admin = add_token(tokens_file, "admin", "admin")
    supervisor = add_token(tokens_file, "supervisors", "supervisor")
    creds = ClusterCredentials(directory, tokens_file, admin, supervisor)
    if tls:
        hosts = list(hosts)
        creds.ca_file, creds.cert_file, creds.key_file = make_tls(directory, hosts)
        creds.supervisor_cert_file, creds.supervisor_key_file = issue_cert(
            creds.ca_file, directory / CA_KEY, directory / "supervisor",
            list(supervisor_hosts) if supervisor_hosts is not None else hosts)
    return creds


def make_tls(directory: Path, hosts: list[str]) -> tuple[Path, Path, Path]:
    """A private CA (``ca.crt``, ``ca.key``) and a nimbus certificate signed by it
    (``nimbus.crt``, ``nimbus.key``) naming every host in ``hosts``: (ca, cert, key)."""
    if shutil.which("openssl") is None:
        raise CredentialsError("the openssl command is needed to make TLS material (apt-get install openssl)")
    ca_crt, ca_key = directory / CA_CERT, directory / CA_KEY
    _check_hosts(hosts, "nimbus")
    _openssl("req", "-x509", "-new", *_EC, "-keyout", ca_key, "-out", ca_crt, "-days", CA_DAYS,
             "-subj", "/CN=squall cluster CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for path in (ca_crt, ca_key):
        os.chmod(path, 0o600)
    crt, key = issue_cert(ca_crt, ca_key, directory / "nimbus", hosts)
    return ca_crt, crt, key


def issue_cert(ca_crt: Path, ca_key: Path, stem: Path, hosts: list[str]) -> tuple[Path, Path]:
    """A server certificate signed by the CA, naming every host in ``hosts`` (a fresh key
    each time, so also the way to rotate a certificate): (``stem``.crt, ``stem``.key)."""
    _check_hosts(hosts, stem.name)
    crt, key = stem.with_suffix(".crt"), stem.with_suffix(".key")
    _openssl("req", "-x509", "-new", *_EC, "-keyout", key, "-out", crt, "-days", CERT_DAYS,
             "-CA", ca_crt, "-CAkey", ca_key, "-subj", f"/CN=squall {stem.name}",
             "-addext", "basicConstraints=critical,CA:FALSE",
             "-addext", "keyUsage=critical,digitalSignature,keyEncipherment",
             "-addext", "extendedKeyUsage=serverAuth",
             "-addext", "subjectAltName=" + ",".join(_san(h) for h in hosts))
    for path in (crt, key):
        os.chmod(path, 0o600)
    return crt, key


def _check_hosts(hosts: list[str], name: str) -> None:
    if not hosts:
        raise CredentialsError(f"a {name} certificate needs at least one host name")


def _san(host: str) -> str:
    try:
        ip_address(host)
    except ValueError:
        return f"DNS:{host}"
    return f"IP:{host}"


def _openssl(*args: Any) -> None:
    _openssl_out(*args)


def _openssl_out(*args: Any, stdin: bytes = b"") -> bytes:
    try:
        proc = subprocess.run(["openssl", *map(str, args)], capture_output=True, input=stdin,
                              timeout=OPENSSL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CredentialsError(f"openssl {args[0]} failed: {exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr.decode(errors="replace").strip().splitlines() or ["(no output)"])[-1]
        raise CredentialsError(f"openssl {args[0]} failed ({proc.returncode}): {last}")
    return proc.stdout
