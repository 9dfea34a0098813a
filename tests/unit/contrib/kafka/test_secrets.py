"""Secrets: never in a topology's configuration, resolved only in the worker, never logged."""
import pytest

from squall.config import ConfigError, build_config, validate
from squall.contrib.kafka.client import KafkaConfigError, client_config, describe, resolve_secrets

SECRET = "hunter2-do-not-leak"


@pytest.mark.parametrize("prop", ["sasl.password", "ssl.key.password", "ssl.keystore.password",
                                  "sasl.oauthbearer.client.secret", "ssl.key.pem", "ssl.certificate.pem"])
def test_secret_properties_are_refused_in_the_client_config(prop):
    with pytest.raises(ConfigError, match="kafka.secrets"):
        validate({"kafka.client.config": {prop: SECRET}})


def test_secret_values_are_refused_in_place_of_references():
    with pytest.raises(ConfigError) as info:
        validate({"kafka.secrets": {"sasl.password": SECRET}})
    assert SECRET not in str(info.value)
    validate({"kafka.secrets": {"sasl.password": "env:KAFKA_PASSWORD", "ssl.key.password": "file:/run/pw"}})


def test_references_resolve_from_the_environment_and_files(tmp_path):
    f = tmp_path / "pw"
    f.write_text(SECRET + "\n")
    got = resolve_secrets({"sasl.password": "env:PW", "ssl.key.password": f"file:{f}"}, {"PW": "from-env"})
    assert got == {"sasl.password": "from-env", "ssl.key.password": SECRET}


def test_missing_sources_name_the_property_never_a_value(tmp_path):
    with pytest.raises(KafkaConfigError, match="sasl.password.*PW is not set"):
        resolve_secrets({"sasl.password": "env:PW"}, {})
    with pytest.raises(KafkaConfigError, match="cannot read"):
        resolve_secrets({"sasl.password": f"file:{tmp_path / 'nope'}"}, {})
    big = tmp_path / "big"
    big.write_bytes(b"x" * 70_000)
    with pytest.raises(KafkaConfigError, match="over"):
        resolve_secrets({"sasl.password": f"file:{big}"}, {})


def test_client_config_merges_layers_and_describe_hides_secrets(monkeypatch):
    monkeypatch.setenv("SQUALL_TEST_KAFKA_PW", SECRET)
    conf = build_config({"kafka.bootstrap.servers": "h:1",
                         "kafka.client.config": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                                 "sasl.username": "u"},
                         "kafka.secrets": {"sasl.password": "env:SQUALL_TEST_KAFKA_PW"}}, user_file=False)
    props = client_config(conf, {"client.id": "me"})
    assert props["sasl.password"] == SECRET and props["bootstrap.servers"] == "h:1" and props["client.id"] == "me"
    shown = describe(props, conf["kafka.secrets"])
    assert SECRET not in repr(shown) and shown["sasl.username"] == "u"
    with pytest.raises(KafkaConfigError, match="bootstrap"):
        client_config(build_config(user_file=False))
