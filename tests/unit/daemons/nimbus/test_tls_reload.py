"""TLS material changes without a restart: nimbus's certificate and key, a client's CA file.

The reload decision and the checks of new material without sockets (FakeClock), then one
real nimbus process taken through a certificate rotation, a broken edit and a CA rotation
while a long-lived client keeps calling it.
"""
from __future__ import annotations

import http.client
import os
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
import structlog.testing

from squall.daemons.file_watch import FileWatch, settled_change
from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.nimbus.client import NimbusClient, NimbusUnavailable
from squall.daemons.nimbus.credentials import create, issue_cert, make_tls
from squall.daemons.nimbus.process import NimbusProcess
from squall.daemons.nimbus.tls_material import TlsMaterial, TlsMaterialError, server_context
from squall.daemons.timers import FakeClock
from squall.testing.waiting import wait_for

HOSTS = ["127.0.0.1", "localhost"]


def der(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


def install(cert: Path, key: Path, into: tuple[Path, Path]) -> None:
    """What an operator does: copy the new pair over the files nimbus was started with."""
    shutil.copyfile(key, into[1])
    shutil.copyfile(cert, into[0])


# --- the decision, without sockets -------------------------------------------------------

def test_a_change_is_acted_on_once_it_has_settled(tmp_path):
    a, b = (1, 10, 7), (2, 20, 7)
    assert not settled_change((a,), (a,), (a,))      # nothing changed
    assert not settled_change((a,), (a,), (b,))      # first seen: it may still be being written
    assert settled_change((a,), (b,), (b,))          # the same twice: read it
    assert not settled_change((a,), (b,), (None,))   # changed again (here: removed)
    clock = FakeClock()
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("one")
    key.write_text("one")
    watch = FileWatch([cert, key], 2.0, clock)
    cert.write_text("two, half written")
    clock.advance(1.0)
    assert not watch.changed()                       # not looked at before the period
    clock.advance(1.0)
    assert not watch.changed()                       # seen once
    key.write_text("two, the key follows")
    clock.advance(2.0)
    assert not watch.changed()                       # still changing
    clock.advance(2.0)
    assert watch.changed()                           # settled
    clock.advance(2.0)
    assert not watch.changed()                       # once per change


def test_new_material_is_checked_and_a_bad_change_keeps_the_old(tmp_path):
    ca, crt, key = make_tls(tmp_path, HOSTS)
    crt2, key2 = issue_cert(ca, tmp_path / "ca.key", tmp_path / "two", HOSTS)
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(["openssl", "pkey", "-in", key, "-aes256", "-passout", "pass:x", "-out", encrypted],
                   check=True, timeout=30)
    damaged = tmp_path / "damaged.crt"
    lines = crt.read_text().splitlines()
    damaged.write_text("\n".join([lines[0], "AAAA", lines[-1]]) + "\n")
    fifo = tmp_path / "fifo.crt"
    os.mkfifo(fifo)
    for pair, text in (((tmp_path / "nothing", key), "cannot read certificate file"),
                       ((fifo, key), f"certificate file {fifo} is not a regular file"),
                       ((crt, crt), f"key file {crt} holds no complete PEM private key"),
                       ((crt, key2), f"key file {key2} does not belong to certificate file {crt}"),
                       ((damaged, key), f"certificate file {damaged} cannot be parsed"),
                       ((crt, encrypted), "holds an encrypted key")):
        with pytest.raises(TlsMaterialError) as info:
            server_context(*map(str, pair))
        assert text in str(info.value)

    clock = FakeClock()
    material = TlsMaterial([crt, key], lambda: server_context(str(crt), str(key)), "TLS certificate and key", clock)
    first = material.context()
    assert first.minimum_version == ssl.TLSVersion.TLSv1_2
    with structlog.testing.capture_logs() as logs:
        crt.write_text(crt.read_text()[:300])  # half written, then left so
        clock.advance(2.0)
        assert material.context() is first
        clock.advance(2.0)
        assert material.context() is first and (material.loaded, material.refused) == (0, 1)
        install(crt2, key2, (crt, key))
        for _ in range(2):
            clock.advance(2.0)
            material.context()
    assert material.context() is not first and material.context().minimum_version == ssl.TLSVersion.TLSv1_2
    assert (material.loaded, material.refused) == (1, 1)
    assert [(e["log_level"], e["event"]) for e in logs] == [
        ("error", "TLS certificate and key changed but cannot be used; the material read before stays in force"),
        ("info", "new TLS certificate and key in force")]
    assert f"certificate file {crt} holds no complete PEM certificate" in logs[0]["error"]


# --- a real nimbus ----------------------------------------------------------------------------

def served_cert(port: int, ca_file: Path) -> bytes:
    """The certificate a new connection to 127.0.0.1:port gets (verified against ``ca_file``)."""
    context = ssl.create_default_context(cafile=str(ca_file))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        return tls.getpeercert(binary_form=True)


def tls_reloads(port: int, access: ApiAccess) -> dict[str, float]:
    """nimbus's squall_tls_reloads_total by result, from its /metrics."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=access.ssl_context)
    try:
        conn.request("GET", "/metrics", headers=access.headers())
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return {line.split('"')[1]: float(line.split()[-1]) for line in text.splitlines()
            if line.startswith("squall_tls_reloads_total{")}


def test_certificate_and_ca_rotate_without_a_restart(cluster_conf, tmp_path):
    creds = create(tmp_path / "security", hosts=HOSTS)
    files = (creds.cert_file, creds.key_file)
    trust = tmp_path / "client-ca.pem"  # a long-lived client's nimbus.tls.ca.file
    shutil.copyfile(creds.ca_file, trust)
    nimbus = NimbusProcess(cluster_conf, tmp_path / "nimbus", credentials=creds).start()
    try:
        pid, port = nimbus.pid, int(nimbus.conf["nimbus.port"])
        access = ApiAccess.from_conf({"squall.token": creds.admin_token, "nimbus.tls.ca.file": str(trust)})
        client = NimbusClient("127.0.0.1", port, 10, access)  # built once, as a supervisor's is
        first = der(creds.cert_file)
        assert served_cert(port, creds.ca_file) == first
        old = nimbus.connection()
        old.request("GET", "/api/v1/cluster", headers=nimbus.auth_headers())
        assert old.getresponse().read() and old.sock.getpeercert(True) == first
        old_sock = old.sock

        def keep_open() -> None:  # an open connection keeps its certificate (and is not idle)
            old.request("GET", "/api/v1/cluster", headers=nimbus.auth_headers())
            reply = old.getresponse()
            assert reply.status == 200 and reply.read() and old.sock is old_sock

        # 1. a new certificate from the same CA
        crt2, key2 = issue_cert(creds.ca_file, creds.directory / "ca.key", tmp_path / "two", HOSTS)
        install(crt2, key2, files)
        wait_for(lambda: keep_open() or served_cert(port, creds.ca_file) == der(crt2), timeout=20,
                 interval=0.2, what="the new certificate served", detail=nimbus.log_tail)
        assert old.sock.getpeercert(True) == first
        old.close()
        assert client.cluster()["nimbus"]["pid"] == pid
        assert tls_reloads(port, access) == {"loaded": 1, "refused": 0}

        # 2. garbage: logged and counted, the certificate in force stays
        creds.cert_file.write_text("not a certificate\n")
        wait_for(lambda: tls_reloads(port, access)["refused"] == 1, timeout=20, interval=0.2,
                 what="the broken certificate refused", detail=nimbus.log_tail)
        assert served_cert(port, creds.ca_file) == der(crt2)
        assert f"certificate file {creds.cert_file} holds no complete PEM certificate" in nimbus.log_tail(40)

        # 3. a CA rotation: old+new CA for the clients, nimbus switched to the new CA, old CA dropped
        new_ca = tmp_path / "new-ca"
        new_ca.mkdir()
        ca2, crt3, key3 = make_tls(new_ca, HOSTS)
        trust.write_text(creds.ca_file.read_text() + ca2.read_text())
        wait_for(lambda: client.cluster() and access.trust.loaded == 1, timeout=20, interval=0.2,
                 what="the client's CA bundle read again")
        install(crt3, key3, files)
        wait_for(lambda: served_cert(port, trust) == der(crt3), timeout=20, interval=0.2,
                 what="the certificate of the new CA served", detail=nimbus.log_tail)
        assert client.cluster()["security"]["tls"]
        with pytest.raises(NimbusUnavailable, match="is not trusted"):  # a client of the old CA only
            NimbusClient.from_conf(nimbus.client_conf()).cluster()
        trust.write_text(ca2.read_text())
        wait_for(lambda: client.cluster() and access.trust.loaded == 2, timeout=20, interval=0.2,
                 what="the old CA dropped")
        assert tls_reloads(port, access) == {"loaded": 2, "refused": 1}
        assert client.cluster()["nimbus"]["pid"] == pid and nimbus.alive()  # never restarted
    finally:
        assert nimbus.stop() == 0, nimbus.log_tail()
