"""TLS material changes without a restart, on a real nimbus process: a certificate rotation, a
broken edit and a CA rotation while a long-lived client keeps calling it (the reload decision
and the checks of new material are in tests/unit/daemons/nimbus/test_tls_reload.py)."""
from __future__ import annotations

import http.client
import shutil
import socket
import ssl
from pathlib import Path

import pytest

from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.nimbus.client import NimbusClient, NimbusUnavailable
from squall.daemons.nimbus.credentials import create, issue_cert, make_tls
from squall.daemons.nimbus.process import NimbusProcess
from squall.testing.waiting import wait_for
from support.tls import HOSTS, install


def der(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


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
