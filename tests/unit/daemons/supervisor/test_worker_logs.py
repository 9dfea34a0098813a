"""Worker logs without a cluster: rotation in the writer, bounded reads, the logviewer's
checks (token, known workers only, bounds) and which workers ``squall logs`` asks for."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from squall.cli.logs import LogSlot, log_slots
from squall.daemons.http.refusals import Refusals
from squall.daemons.nimbus.auth import PublishedTokenSource, token_hash
from squall.daemons.nimbus.guard import Guard
from squall.daemons.state import PublishedTokens
from squall.daemons.supervisor import logviewer
from squall.daemons.supervisor.log_reader import read_from, tail
from squall.rotating_log import RotatingLogFile


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_rotation_keeps_whole_lines_and_at_most_the_backups(tmp_path):
    log = RotatingLogFile(tmp_path / "worker.log", max_bytes=100, backups=2)
    for i in range(40):
        log.write(f"line {i:03d} {'x' * 10}\n")  # 20 bytes: five lines a file
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["worker.log", "worker.log.1", "worker.log.2"]
    assert [lines_of(tmp_path / n) for n in ("worker.log.2", "worker.log.1", "worker.log")] == [
        [f"line {i:03d} {'x' * 10}" for i in range(k, k + 5)] for k in (25, 30, 35)]
    assert all((tmp_path / n).stat().st_size <= 100 for n in names)


def test_no_backups_truncates_in_place(tmp_path):
    log = RotatingLogFile(tmp_path / "worker.log", max_bytes=50, backups=0)
    for i in range(10):
        log.write(f"{i:09d}\n")
    log.close()
    assert [p.name for p in tmp_path.iterdir()] == ["worker.log"]
    assert lines_of(tmp_path / "worker.log") == [f"{i:09d}" for i in range(5, 10)]


def test_bad_bounds_are_refused(tmp_path):
    with pytest.raises(ValueError, match="max_bytes"):
        RotatingLogFile(tmp_path / "w.log", max_bytes=0, backups=1)


def write_lines(path: Path, start: int, count: int) -> None:
    with open(path, "a") as fh:
        fh.writelines(f"entry {i}\n" for i in range(start, start + count))


def test_tail_spans_rotated_files_and_stops_at_the_byte_bound(tmp_path):
    path = tmp_path / "worker.log"
    write_lines(path.with_name("worker.log.2"), 0, 10)
    write_lines(path.with_name("worker.log.1"), 10, 10)
    write_lines(path, 20, 5)
    read = tail(path, backups=2, lines=12, max_bytes=10_000)
    assert read.text.splitlines() == [f"entry {i}" for i in range(13, 25)] and not read.truncated
    assert read.next_offset == path.stat().st_size and read.inode == path.stat().st_ino
    assert tail(path, backups=2, lines=1000, max_bytes=10_000).text.splitlines()[0] == "entry 0"
    assert tail(path, backups=1, lines=1000, max_bytes=10_000).text.splitlines()[0] == "entry 10"
    cut = tail(path, backups=2, lines=1000, max_bytes=30)  # "entry 2x\n" is 9 bytes
    assert cut.text.splitlines() == ["entry 22", "entry 23", "entry 24"] and cut.truncated


def test_read_from_follows_and_notices_rotation(tmp_path):
    path = tmp_path / "worker.log"
    write_lines(path, 0, 3)
    first = tail(path, backups=0, lines=10, max_bytes=1000)
    path.open("a").write("entry 3\nhalf a li")
    more = read_from(path, first.next_offset, 1000, first.inode)
    assert more.text == "entry 3\n"  # the partial line waits
    path.open("a").write("ne\n")
    assert read_from(path, more.next_offset, 1000, more.inode).text == "half a line\n"
    path.rename(path.with_name("worker.log.1"))
    write_lines(path, 100, 1)
    assert read_from(path, more.next_offset, 1000, more.inode).text == "entry 100\n"  # a new file: from 0
    assert read_from(tmp_path / "missing.log", 0, 1000).text == ""


def call(app, path: str, token: str | None = "admin-token-0123456789", method: str = "GET",
         query: str = "") -> tuple[int, dict]:
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "wsgi.input": io.BytesIO()}
    if token is not None:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    seen = {}
    body = b"".join(app(environ, lambda status, headers: seen.update(status=int(status.split()[0]))))
    return seen["status"], json.loads(body)


# token -> (user, role); alice owns topo-1
TOKENS = {"admin-token-0123456789": ("root", "admin"), "alice-token-0123456789": ("alice", "user"),
          "bob-token-0123456789ab": ("bob", "user"), "viewer-token-012345678": ("vera", "viewer"),
          "nimbus-token-012345678": ("supervisors", "supervisor")}


def published(enabled: bool = True) -> PublishedTokens:
    return PublishedTokens(enabled, tuple((token_hash(t), u, r) for t, (u, r) in TOKENS.items()))


@pytest.fixture
def viewer(tmp_path):
    log = tmp_path / "workers" / "w1" / "worker.log"
    log.parent.mkdir(parents=True)
    write_lines(log, 0, 500)
    (tmp_path / "secret.txt").write_text("not for you\n")
    known = {("topo-1", 6700): ("w1", log)}
    source = PublishedTokenSource()
    guard = Guard(source, Refusals())
    app = logviewer.make_app(lambda t, p: known.get((t, p)), {"topo-1": "alice"}.get, guard,
                             backups=2, max_bytes=400)
    app.source, app.guard = source, guard
    return app


def test_logviewer_serves_known_workers_only_with_the_token(viewer):
    viewer.source.update(published())
    code, body = call(viewer, "/logs/topo-1/6700", query="lines=3")
    assert code == 200 and body["text"] == "entry 497\nentry 498\nentry 499\n" and body["worker_id"] == "w1"
    code, more = call(viewer, "/logs/topo-1/6700", query=f"offset={body['next_offset']}&inode={body['inode']}")
    assert code == 200 and more["text"] == ""
    code, big = call(viewer, "/logs/topo-1/6700", query="lines=100000")
    assert code == 200 and len(big["text"]) <= 400 and big["truncated"]
    for token in (None, "", "wrong", "admin-token-0123456789x", "admin-token-012345678"):
        assert call(viewer, "/logs/topo-1/6700", token=token)[0] == 401
    assert "Bearer" in call(viewer, "/logs/topo-1/6700", token=None)[1]["error"]
    for path in ("/logs/topo-1/6701", "/logs/topo-2/6700", "/logs/../secret.txt/1", "/logs/topo-1/../../secret.txt",
                 "/logs/topo-1", "/etc/passwd"):
        code, body = call(viewer, path)
        assert code == 404 and "not for you" not in json.dumps(body), path
    assert call(viewer, "/logs/topo-1/6700", query="lines=0")[0] == 400
    assert call(viewer, "/logs/topo-1/6700", query="lines=-5")[0] == 400
    assert call(viewer, "/logs/topo-1/6700", query="offset=abc")[0] == 400
    assert call(viewer, "/logs/topo-1/6700", method="POST")[0] == 405
    assert viewer.guard.refusals.counts()["unauthenticated"] == 6


def test_logviewer_roles_follow_the_published_tokens(viewer):
    def status(token: str, topology: str = "topo-1") -> int:
        return call(viewer, f"/logs/{topology}/6700", token=token, query="lines=1")[0]

    # Nothing published yet: every caller is refused, the admin too.
    assert {status(t) for t in TOKENS} == {401}
    viewer.source.update(published())
    assert {t: status(t) for t in TOKENS} == {
        "admin-token-0123456789": 200, "alice-token-0123456789": 200, "bob-token-0123456789ab": 404,
        "viewer-token-012345678": 200, "nimbus-token-012345678": 200}
    # A user learns nothing of a topology it does not own: answered as one that does not exist.
    assert call(viewer, "/logs/topo-1/6700", token="bob-token-0123456789ab") == \
        (404, {"error": "no worker of topo-1 runs on port 6700 here"})
    assert call(viewer, "/logs/topo-2/6700", token="alice-token-0123456789") == \
        (404, {"error": "no worker of topo-2 runs on port 6700 here"})
    assert status("admin-token-0123456789", "topo-2") == 404
    # A node deleted or malformed keeps the last table: bad data never opens the door.
    assert viewer.source.update(None) == "kept"
    assert status("bob-token-0123456789ab") == 404 and call(viewer, "/logs/topo-1/6700", token=None)[0] == 401
    # Revocation: the next table without alice's token refuses her.
    viewer.source.update(PublishedTokens(True, tuple(e for e in published().entries if e[1] != "alice")))
    assert status("alice-token-0123456789") == 401 and status("admin-token-0123456789") == 200
    # Nimbus with API authentication off publishes "off": the logviewer is open as well.
    assert viewer.source.update(published(enabled=False)) == "off"
    assert call(viewer, "/logs/topo-1/6700", token=None, query="lines=1")[0] == 200


def test_published_tokens_are_checked_before_use():
    good = published().to_dict()
    assert PublishedTokens.from_dict(good) == published()
    for bad in ({"enabled": True}, {"enabled": "yes", "tokens": []}, {"enabled": True, "tokens": [["x", "u", "r"]]},
                {"enabled": True, "tokens": [[token_hash("t" * 20), "", "admin"]]},
                {"enabled": True, "tokens": [[token_hash("t" * 20).upper(), "u", "admin"]]},
                {"enabled": True, "tokens": [[token_hash("t" * 20), "u"]]},
                {"enabled": True, "tokens": {"a": 1}}):
        with pytest.raises(ValueError):
            PublishedTokens.from_dict(bad)


STATUS = {"name": "t", "components": [
    {"id": "spout", "executors": [{"executor": [3, 3], "node": "n1", "host": "h1", "port": 1}]},
    {"id": "bolt", "executors": [{"executor": [4, 5], "node": "n1", "host": "h1", "port": 1},
                                 {"executor": [6, 7], "node": "n2", "host": "h2", "port": 2},
                                 {"executor": [8, 8], "node": None, "host": None, "port": None}]},
]}


def test_log_slots_by_component_and_task():
    both = [LogSlot("n1", "h1", 1), LogSlot("n2", "h2", 2)]
    assert log_slots(STATUS) == both
    assert log_slots(STATUS, component="bolt") == both
    assert log_slots(STATUS, component="spout") == [LogSlot("n1", "h1", 1)]
    assert log_slots(STATUS, task=7) == [LogSlot("n2", "h2", 2)]
    with pytest.raises(ValueError, match="no component 'nope'"):
        log_slots(STATUS, component="nope")
    with pytest.raises(ValueError, match="runs task 8 now"):
        log_slots(STATUS, task=8)  # not placed
    with pytest.raises(ValueError, match="runs task 99"):
        log_slots(STATUS, task=99)


def test_a_log_replaced_by_a_link_is_not_followed(tmp_path):
    """A worker owns its directory: a link to a file only the supervisor can read must not
    turn the logviewer into a way to read it."""
    key = tmp_path / "ca.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    log = tmp_path / "worker.log"
    log.symlink_to(key)
    assert "PRIVATE KEY" not in tail(log, 2, 10, 1 << 20).text
    assert "PRIVATE KEY" not in read_from(log, 0, 1 << 20).text
