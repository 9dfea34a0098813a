"""Security commands of the ``squall`` CLI: API tokens and a cluster's security material.

``squall token add`` / ``squall token remove`` edit a token file (``nimbus.auth.tokens.file``;
nimbus applies a change within seconds). ``squall secure-init DIR``
makes what a cluster of hosts or containers needs (the compose file uses it): a token file
with an admin and a supervisor token, a CA, nimbus's certificate and key, a client config
and ``supervisor.env``, the daemons' environment file: the supervisor token
(``SQUALL_TOKEN``) and the daemons' ZooKeeper password (``SQUALL_ZOOKEEPER_PASSWORD``).
Nimbus and supervisors need both (nimbus's code sync presents the supervisor token), so one
file serves both. ``squall lock-zookeeper`` closes the nodes outside squall's root (``/``,
``/zookeeper``, the root's ancestors) to clients without credentials.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

import click
import yaml

from squall.command_line import OVERRIDES, Failure, base_config, parse_overrides
from squall.daemons.nimbus.access import TOKEN_ENV
from squall.daemons.nimbus.auth import ROLES, TokenFileError, add_token, parse_entries, write_private
from squall.daemons.nimbus.credentials import CA_CERT, DAEMON_USER, CredentialsError, create, daemon_auth_conf
from squall.daemons.state import ClusterState, ClusterStateError
from squall.daemons.state.acls import PASSWORD_ENV

CLIENT_FILE = "client.yaml"
DAEMON_ENV_FILE = "supervisor.env"  # the name predates the ZooKeeper password in it
PROMETHEUS_TOKEN_FILE = "prometheus-token"  # docker-compose.yml hands it to Prometheus
# The compose Kafka broker's SASL/PLAIN user: its password for topologies (kafka.secrets
# sasl.password: file:...) and the broker's own settings naming it.
KAFKA_USER = "squall"
KAFKA_PASSWORD_FILE = "kafka-password"
KAFKA_ENV_FILE = "kafka.env"
PROMETHEUS_UID = 65534  # the prom/prometheus image's user (nobody)


@click.group("token")
def token() -> None:
    """Add or remove API tokens in a token file (nimbus.auth.tokens.file)."""


@token.command("add")
@click.option("--file", "path", type=click.Path(dir_okay=False), required=True, help="The token file.")
@click.option("--user", required=True, help="User name (owner of the topologies it submits).")
@click.option("--role", type=click.Choice(ROLES), required=True, help="What the token may do.")
def token_add(path: str, user: str, role: str) -> None:
    """Add a token for USER and print it (the file keeps only its sha256)."""
    try:
        click.echo(add_token(path, user, role))
    except TokenFileError as exc:
        raise Failure(str(exc)) from None


@token.command("remove")
@click.option("--file", "path", type=click.Path(dir_okay=False, exists=True), required=True, help="The token file.")
@click.option("--user", required=True, help="Remove the tokens of this user.")
@click.option("--sha256", "prefix", default="", help="Only the entry whose sha256 starts with this (8+ hex digits).")
def token_remove(path: str, user: str, prefix: str) -> None:
    """Revoke the tokens of USER, or one of them (nimbus applies it within seconds)."""
    if prefix and len(prefix) < 8:
        raise click.BadParameter("give at least 8 hex digits", param_hint="--sha256")
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        parse_entries(doc, path)
    except (OSError, yaml.YAMLError, TokenFileError) as exc:
        raise Failure(f"cannot use token file {path}: {exc}") from None
    kept = [row for row in doc["tokens"]
            if row["user"] != user or not row["sha256"].lower().startswith(prefix.lower())]
    if len(kept) == len(doc["tokens"]):
        raise Failure(f"token file {path} has no matching token of user {user!r}")
    write_private(Path(path), yaml.safe_dump({"tokens": kept}, sort_keys=False))
    click.echo(f"removed {len(doc['tokens']) - len(kept)} token(s) of {user}; nimbus applies it within seconds")


@click.command("secure-init")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--host", "hosts", multiple=True, required=True,
              help="A name or address clients use for nimbus (its certificate names each); repeatable.")
@click.option("--supervisor-host", "supervisor_hosts", multiple=True,
              help="A supervisor.host (the supervisors' certificate names each); repeatable; default the --host names.")
@click.option("--port", type=click.IntRange(1, 65535), default=6627, show_default=True,
              help="nimbus.port for the client config.")
@click.option("--mount", default=None,
              help="Where DIRECTORY is mounted for the daemons (e.g. /etc/squall/security); default DIRECTORY.")
@click.option("--uid", type=int, default=None, help="Give the files to this user id (the containers' user).")
def secure_init(directory: str, hosts: tuple[str, ...], supervisor_hosts: tuple[str, ...], port: int,
                mount: str | None, uid: int | None) -> None:
    """Make tokens, a CA, nimbus's and the supervisors' certificates in DIRECTORY, plus
    client.yaml (admin), prometheus-token (a viewer's) and supervisor.env (the daemons'
    SQUALL_TOKEN and SQUALL_ZOOKEEPER_PASSWORD, for nimbus and supervisors). A ZooKeeper
    password already in supervisor.env is kept: ZooKeeper's ACLs name its hash, and a new one
    would lock the daemons out of their own nodes."""
    target = Path(directory).resolve()
    env_path = target / DAEMON_ENV_FILE
    try:
        zk_password = (read_env_file(env_path) if env_path.exists() else {}).get(PASSWORD_ENV)
    except (OSError, ValueError) as exc:
        raise Failure(f"cannot read {env_path}: {exc}") from None
    kept = bool(zk_password)
    zk_password = zk_password or daemon_auth_conf()["zookeeper.auth.password"]
    try:
        creds = create(target, hosts=hosts, supervisor_hosts=supervisor_hosts or hosts)
        prometheus = creds.add_user("prometheus", "viewer")
    except (CredentialsError, TokenFileError) as exc:
        raise Failure(str(exc)) from None
    client = {"nimbus.host": hosts[0], "nimbus.port": port, **creds.client_conf()}
    write_private(target / CLIENT_FILE, yaml.safe_dump(client, sort_keys=True))
    write_private(env_path, f"{TOKEN_ENV}={creds.supervisor_token}\n{PASSWORD_ENV}={zk_password}\n")
    write_private(target / PROMETHEUS_TOKEN_FILE, prometheus + "\n")
    _kafka_material(target)
    if mount:
        daemon_conf = {k: v.replace(str(target), mount) if isinstance(v, str) else v
                       for k, v in {**creds.nimbus_conf(), **creds.supervisor_conf()}.items()
                       if k != "squall.token"}
        daemon_conf["zookeeper.auth.user"] = DAEMON_USER
        click.echo(f"daemon settings ({TOKEN_ENV} and {PASSWORD_ENV} from {DAEMON_ENV_FILE}):\n"
                   + yaml.safe_dump(daemon_conf, sort_keys=True))
    if uid is not None:
        try:
            for path in [target, *target.iterdir()]:
                os.chown(path, uid, -1)
            # Prometheus's container runs as another user: its token is its own, and a CA
            # certificate is public (its key stays the owner's).
            os.chown(target / PROMETHEUS_TOKEN_FILE, PROMETHEUS_UID, -1)
            os.chmod(target / CA_CERT, 0o644)
        except OSError as exc:
            raise Failure(f"cannot give {target} to uid {uid}: {exc}") from None
    if kept:
        click.echo(f"kept the daemons' ZooKeeper password from {env_path}")
    click.echo(f"security material in {target}; clients: SQUALL_CONF={target / CLIENT_FILE}")


def _kafka_material(target: Path) -> None:
    """kafka-password (kept when there is one) and kafka.env, the compose broker's SASL/PLAIN
    settings with that password."""
    path = target / KAFKA_PASSWORD_FILE
    try:
        password = path.read_text(encoding="utf-8").strip() if path.exists() else ""
    except OSError as exc:
        raise Failure(f"cannot read {path}: {exc.strerror}") from None
    password = password or secrets.token_urlsafe(32)
    write_private(path, password + "\n")
    jaas = (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{KAFKA_USER}" '
            f'password="{password}" user_{KAFKA_USER}="{password}";')
    write_private(target / KAFKA_ENV_FILE, f"KAFKA_LISTENER_NAME_CLIENT_PLAIN_SASL_JAAS_CONFIG={jaas}\n")


def read_env_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """``KEY=VALUE`` lines (compose's ``env_file``, systemd's ``EnvironmentFile``); blank lines
    and ``#`` comments skipped; ValueError naming the line otherwise."""
    out = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"line {number} is not KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


@click.command("lock-zookeeper")
@OVERRIDES
def lock_zookeeper(overrides: tuple[str, ...]) -> None:
    """Refuse writes outside squall's root to ZooKeeper clients without credentials.

    A fresh ZooKeeper lets anyone create nodes under / and /zookeeper, enough to fill its
    memory and crash it. This gives those nodes (and the ancestors of zookeeper.root) an ACL
    that lets the daemons' credential do anything and everyone else only read. Run it with
    the daemons' configuration (zookeeper.auth.user, and the password in
    zookeeper.auth.password or $SQUALL_ZOOKEEPER_PASSWORD); running it again changes nothing."""
    conf = base_config(parse_overrides(overrides))
    try:
        with ClusterState(conf, warn_outside_open=False) as state:
            changed = state.lock_outside()
    except (ClusterStateError, ValueError) as exc:
        raise Failure(str(exc)) from None
    if changed:
        click.echo(f"locked {', '.join(changed)}: only the daemons' credential may write there")
    else:
        click.echo("nothing to lock: no node outside the root is writable without credentials")


COMMANDS = [token, secure_init, lock_zookeeper]
