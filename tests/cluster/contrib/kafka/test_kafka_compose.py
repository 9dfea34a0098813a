"""The compose file's Kafka broker: docker-compose itself resolves it, the broker takes
SASL/PLAIN only, with the password secure-init made, and no squall secret reaches it."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from click.testing import CliRunner

from squall.cli import main
from squall.cli.security import KAFKA_ENV_FILE, KAFKA_PASSWORD_FILE, read_env_file
from support.paths import COMPOSE_FILE, docker_compose


def test_compose_kafka_broker_requires_the_secure_init_password(tmp_path: Path) -> None:
    shutil.copy(COMPOSE_FILE, tmp_path / COMPOSE_FILE.name)
    result = CliRunner().invoke(main, ["secure-init", str(tmp_path / "secrets"), "--host", "nimbus"])
    assert result.exit_code == 0, result.output
    password = (tmp_path / "secrets" / KAFKA_PASSWORD_FILE).read_text().strip()
    assert len(password) >= 32 and (tmp_path / "secrets" / KAFKA_PASSWORD_FILE).stat().st_mode & 0o077 == 0
    resolved = subprocess.run([docker_compose(), "config"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert resolved.returncode == 0, resolved.stderr
    services = yaml.safe_load(resolved.stdout)["services"]
    kafka = services["kafka"]
    env = kafka["environment"]
    assert "ports" not in kafka  # on the compose network only
    assert set(env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")) == {"CLIENT:SASL_PLAINTEXT",
                                                                          "CONTROLLER:PLAINTEXT"}
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "CLIENT://kafka:9092"
    assert f'password="{password}"' in env["KAFKA_LISTENER_NAME_CLIENT_PLAIN_SASL_JAAS_CONFIG"]
    assert not {"SQUALL_TOKEN", "SQUALL_ZOOKEEPER_PASSWORD"} & set(env)
    for name in ("supervisor-1", "supervisor-2"):
        assert any(v.get("target") == "/etc/squall/security/kafka-password" if isinstance(v, dict)
                   else v.split(":")[1] == "/etc/squall/security/kafka-password" for v in services[name]["volumes"])
    # secure-init again keeps the password (topologies and the broker keep agreeing)
    CliRunner().invoke(main, ["secure-init", str(tmp_path / "secrets"), "--host", "nimbus"])
    assert (tmp_path / "secrets" / KAFKA_PASSWORD_FILE).read_text().strip() == password
    assert password in read_env_file(tmp_path / "secrets" / KAFKA_ENV_FILE)[
        "KAFKA_LISTENER_NAME_CLIENT_PLAIN_SASL_JAAS_CONFIG"]
