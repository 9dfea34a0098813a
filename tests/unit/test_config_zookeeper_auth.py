"""The daemons' ZooKeeper credential as the configuration reads it (squall.config), below the
daemons that use it: what a bad pair says, and where the password may come from."""
import pytest

from squall.config import ZOOKEEPER_PASSWORD_ENV, ConfigError, build_config, zookeeper_auth


def test_the_pair_from_conf_or_the_password_from_the_environment():
    assert zookeeper_auth({}, {}) is None
    assert zookeeper_auth({"zookeeper.auth.user": "squall", "zookeeper.auth.password": "p"}, {}) == ("squall", "p")
    env = {ZOOKEEPER_PASSWORD_ENV: "from-env"}
    assert zookeeper_auth({"zookeeper.auth.user": "squall"}, env) == ("squall", "from-env")
    assert zookeeper_auth({"zookeeper.auth.user": "squall", "zookeeper.auth.password": "p"}, env) == ("squall", "p")
    assert zookeeper_auth({}, env) is None  # the variable alone turns nothing on


@pytest.mark.parametrize("conf, message", [
    ({"zookeeper.auth.user": "squall"}, "'zookeeper.auth.user' and 'zookeeper.auth.password'"),
    ({"zookeeper.auth.password": "p"}, "'zookeeper.auth.user' and 'zookeeper.auth.password'"),
    ({"zookeeper.auth.user": "a:b", "zookeeper.auth.password": "p"}, "contain no ':'"),
])
def test_a_bad_pair_is_a_config_error_naming_it(conf, message, monkeypatch):
    monkeypatch.delenv(ZOOKEEPER_PASSWORD_ENV, raising=False)
    with pytest.raises(ConfigError, match=message):
        zookeeper_auth(conf, {})
    with pytest.raises(ConfigError, match="^config: .*" + message):
        build_config(conf, user_file=False)
