"""TLS material changes without a restart: nimbus's certificate and key, a client's CA file.

The reload decision and the checks of new material without sockets (FakeClock); a real
nimbus taken through a rotation is in tests/cluster/daemons/nimbus/test_tls_rotation.py.
"""
from __future__ import annotations

import os
import ssl
import subprocess

import pytest
import structlog.testing

from squall.daemons.file_watch import FileWatch, settled_change
from squall.daemons.http.tls_material import TlsMaterial, TlsMaterialError, server_context
from squall.daemons.nimbus.credentials import issue_cert, make_tls
from squall.daemons.timers import FakeClock
from support.tls import HOSTS, install


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


