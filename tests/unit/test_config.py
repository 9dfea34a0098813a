"""Configuration: defaults, overrides, errors that name the key."""
import pytest
import yaml

from squall import config
from squall.conf import DEFAULTS_PATH
from squall.registry import Registry


def test_defaults_and_schema_describe_the_same_keys():
    assert set(config.load_defaults()) == set(config.known_keys())
    config.validate(config.load_defaults())


def test_each_feature_registers_its_own_keys_where_config_looks_for_them():
    """A key under a feature's prefix is registered by the module FEATURE_KEYS names for
    it (that module is what config imports to check it); the core registers none there;
    every named module registers keys."""
    for key in config.known_keys():
        prefix = max((p for p in config.FEATURE_KEYS if key.startswith(p)), key=len, default=None)
        expected = config.FEATURE_KEYS[prefix] if prefix else "squall.config"
        assert config.KEYS.origin(key) == expected, key
    assert {config.KEYS.origin(k) for k in config.known_keys()} == {"squall.config", *config.KEYS.providers}
    for prefix in config.FEATURE_KEYS:
        assert prefix.startswith(config.OWN_PREFIXES)  # an unknown key there is an error, not user config


def test_every_default_key_has_a_comment():
    for line in DEFAULTS_PATH.read_text().splitlines():
        if line and not line.startswith("#") and ":" in line:
            assert "#" in line, f"no comment on: {line}"


@pytest.mark.parametrize("key, value, message", [
    ("topology.workerz", 1, "unknown config key 'topology.workerz'"),
    ("topology.workers", "three", "config key 'topology.workers' expects int"),
    ("topology.workers", 0, "must be at least 1"),
    ("topology.message.timeout.secs", float("nan"), "'topology.message.timeout.secs' must be a finite number"),
    ("nimbus.task.timeout.secs", float("inf"), "'nimbus.task.timeout.secs' must be a finite number"),
    ("worker.receive.low.watermark", float("-inf"), "must be a finite number"),
    ("nimbus.monitor.freq.secs", 0, "'nimbus.monitor.freq.secs' must be more than 0.0"),
    ("supervisor.worker.timeout.secs", -5, "must be more than 0.0"),
    ("supervisor.slots.ports", [6700, 70000],
     "'supervisor.slots.ports' must be at least 1 and at most 65535, got 70000"),
    ("zookeeper.port", 0, "'zookeeper.port' must be at least 1"),
    ("worker.receive.high.watermark", 1.5, "at most 1.0"),
    ("zmq.max.message.bytes", 10, "'zmq.max.message.bytes' must be at least 1024"),
    ("topology.message.timeout.secs", 10**9, "at most 86400"),
    ("topology.debug", "yes", "expects bool"),
    ("supervisor.slots.ports", [6700, "x"], "expects list\\[int\\]"),
    ("squall.log.format", "xml", "expects enum"),
    ("zookeeper.root", None, "may not be null"),
])
def test_bad_keys_and_types_are_named(key, value, message):
    with pytest.raises(config.ConfigError, match=message):
        config.validate({key: value})


def test_nan_and_infinity_from_yaml_and_the_command_line_are_refused():
    for raw in (".nan", ".inf", "-.inf"):
        with pytest.raises(config.ConfigError, match="'nimbus.task.timeout.secs' must be a finite number"):
            config.parse_overrides([f"nimbus.task.timeout.secs={raw}"])


def test_user_keys_pass_through():
    assert config.validate({"wordcount.sentences": 5}) == {"wordcount.sentences": 5}


def test_override_order_defaults_file_topology_cli(tmp_path, monkeypatch):
    f = tmp_path / "squall.yaml"
    f.write_text(yaml.safe_dump({"topology.workers": 3, "nimbus.port": 7000}))
    monkeypatch.setenv("SQUALL_CONF", str(f))
    conf = config.build_config({"topology.workers": 4}, config.parse_overrides(["nimbus.port=7100"]))
    assert conf["topology.workers"] == 4 and conf["nimbus.port"] == 7100
    assert config.build_config()["topology.workers"] == 3


def test_bad_user_file_and_override_syntax(tmp_path, monkeypatch):
    f = tmp_path / "squall.yaml"
    f.write_text("topology.workers: [")
    monkeypatch.setenv("SQUALL_CONF", str(f))
    with pytest.raises(config.ConfigError, match="not valid YAML"):
        config.build_config()
    f.write_text("- a list")
    with pytest.raises(config.ConfigError, match="must hold a mapping"):
        config.build_config()
    with pytest.raises(config.ConfigError, match="not of the form key=value"):
        config.parse_overrides(["topology.workers"])
    assert config.parse_overrides(["supervisor.slots.ports=[1, 2]"]) == {"supervisor.slots.ports": [1, 2]}


def test_a_config_of_core_and_user_keys_imports_no_feature(monkeypatch):
    """A process that imported no feature yet (the core's keys only): a config naming no
    feature's key loads none; a Kafka key asks for Kafka's module, and only that."""
    fresh = Registry("config key", providers=config.KEYS.providers)
    for key in config.known_keys():
        if config.KEYS.origin(key) == "squall.config":
            fresh.register(key, config.KEYS.get(key), "squall.config")
    asked: list = []
    monkeypatch.setattr(fresh, "load", lambda module=None: asked.append(module))
    monkeypatch.setattr(config, "KEYS", fresh)
    config.validate({"topology.workers": 2, "my.own.setting": 1})
    assert asked == []
    with pytest.raises(config.ConfigError, match="unknown config key 'kafka.bolt.max.in.flight'"):
        config.validate({"kafka.bolt.max.in.flight": 10})  # the stand-in loader registered nothing
    assert asked[0] == "squall.contrib.kafka.conf"


@pytest.mark.parametrize("env, message", [
    ({"PATH": "/tmp"}, "PATH is set by squall for every worker"),
    ({"LD_PRELOAD": "/tmp/x.so"}, "LD_PRELOAD is set by squall"),
    ({"PYTHONPATH": "/tmp"}, "PYTHONPATH is set by squall"),
    ({"squall_conf": "/tmp/x"}, "squall_conf is set by squall"),
    ({"HOME": "/"}, "HOME is set by squall"),
    ({"1BAD": "x"}, "'1BAD' is not a variable name"),
    ({"A=B": "x"}, "is not a variable name"),
    ({"GOOD": 3}, "GOOD must be a string"),
    ({"GOOD": "a\0b"}, "without NUL"),
    ({f"V{i}": "x" for i in range(101)}, "101 variables, more than 100"),
])
def test_topology_environment_cannot_touch_what_squall_sets(env, message):
    with pytest.raises(config.ConfigError, match=message):
        config.validate({"topology.environment": env})


def test_topology_environment_of_plain_variables_passes():
    env = {"REDIS_URL": "redis://127.0.0.1:6379/1", "APP_MODE": "batch", "_X": ""}
    assert config.validate({"topology.environment": env})["topology.environment"] == env
