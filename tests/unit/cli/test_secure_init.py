"""``squall secure-init`` and ``squall token``, run in-process: the files they write, their modes
and owners, and token rotation."""
from __future__ import annotations

import os
import stat
import subprocess

import pytest
import yaml

from squall.cli.security import read_env_file
from squall.daemons.nimbus.auth import TokenTable, token_hash


def test_secure_init_and_token_commands(tmp_path):
    from click.testing import CliRunner

    from squall.cli import main

    runner = CliRunner()
    target = tmp_path / "sec"
    result = runner.invoke(main, ["secure-init", str(target), "--host", "127.0.0.1", "--host", "nimbus"])
    assert result.exit_code == 0, result.output
    client = yaml.safe_load((target / "client.yaml").read_text())
    table = TokenTable.load(target / "tokens.yaml")
    assert table.lookup(client["squall.token"]).role == "admin"
    daemon_env = read_env_file(target / "supervisor.env")
    assert table.lookup(daemon_env["SQUALL_TOKEN"]).role == "supervisor"
    zk_password = daemon_env["SQUALL_ZOOKEEPER_PASSWORD"]
    assert len(zk_password) >= 32
    # A second run (e.g. for another host name) makes new tokens and TLS material but keeps the
    # ZooKeeper password: the ACLs of the cluster's nodes name its hash.
    again = runner.invoke(main, ["secure-init", str(target), "--host", "127.0.0.1", "--mount", "/etc/squall/security"])
    assert again.exit_code == 0 and "kept the daemons' ZooKeeper password" in again.output, again.output
    daemon_env2 = read_env_file(target / "supervisor.env")
    assert daemon_env2["SQUALL_ZOOKEEPER_PASSWORD"] == zk_password
    assert daemon_env2["SQUALL_TOKEN"] != daemon_env["SQUALL_TOKEN"]
    printed = yaml.safe_load(again.output.split(":\n", 1)[1].split("kept the")[0])
    assert printed["zookeeper.auth.user"] == "squall" and printed["nimbus.tls.ca.file"] == "/etc/squall/security/ca.crt"
    assert not {"squall.token", "zookeeper.auth.password"} & printed.keys() and zk_password not in again.output
    client = yaml.safe_load((target / "client.yaml").read_text())
    table = TokenTable.load(target / "tokens.yaml")
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in target.iterdir())
    assert "BEGIN" not in (target / "tokens.yaml").read_text() and client["squall.token"] not in (
        target / "tokens.yaml").read_text()
    # A rotation: add a second token for alice, remove the first by its hash prefix.
    tokens = [runner.invoke(main, ["token", "add", "--file", str(target / "tokens.yaml"), "--user", "alice",
                                   "--role", "user"]).output.strip() for _ in range(2)]
    removed = runner.invoke(main, ["token", "remove", "--file", str(target / "tokens.yaml"), "--user", "alice",
                                   "--sha256", token_hash(tokens[0])[:12]])
    assert removed.exit_code == 0, removed.output
    table = TokenTable.load(target / "tokens.yaml")
    assert table.lookup(tokens[0]) is None and table.lookup(tokens[1]).user == "alice"
    assert runner.invoke(main, ["token", "add", "--file", str(target / "tokens.yaml"), "--user", "x",
                                "--role", "root"]).exit_code == 2
    # The supervisors' certificate names the --supervisor-host names; Prometheus's token is a viewer's.
    assert (target / "supervisor.crt").is_file() and (target / "supervisor.key").is_file()
    assert table.lookup((target / "prometheus-token").read_text().strip()).role == "viewer"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")
def test_secure_init_gives_the_files_to_the_containers_users(tmp_path):
    from click.testing import CliRunner

    from squall.cli import main

    target = tmp_path / "sec"
    result = CliRunner().invoke(main, ["secure-init", str(target), "--host", "nimbus", "--supervisor-host",
                                       "supervisor-1", "--uid", "1000"])
    assert result.exit_code == 0, result.output
    owners = {p.name: (p.stat().st_uid, stat.S_IMODE(p.stat().st_mode)) for p in target.iterdir()}
    assert owners.pop("prometheus-token") == (65534, 0o600)  # the Prometheus image's user
    assert owners.pop("ca.crt") == (1000, 0o644)  # public; its key is not
    assert set(owners.values()) == {(1000, 0o600)}, owners
    assert target.stat().st_uid == 1000 and stat.S_IMODE(target.stat().st_mode) == 0o700
    names = subprocess.run(["openssl", "x509", "-in", str(target / "supervisor.crt"), "-noout", "-ext",
                            "subjectAltName"], capture_output=True, text=True, timeout=30).stdout
    assert "DNS:supervisor-1" in names and "DNS:nimbus" not in names
