"""The nimbus API's policy as plain code, without sockets: who may do what (``authorize``),
what a refusal is answered (``decide``: 404 for what a caller may not see), whose series a
supervisor's /metrics shows, token files, the ignore rules of code bundles, and bounded
refusal logging."""
from __future__ import annotations

import io
import stat
import tarfile

import pytest
import structlog
import structlog.testing

from squall.daemons.http.refusals import LOG_WINDOW_SECS, LOGS_PER_WINDOW, REASONS, Refusals
from squall.daemons.nimbus.auth import (
    ACTIONS,
    CONTROL,
    FETCH_CODE,
    READ,
    READ_LOGS,
    REPORT,
    SUBMIT,
    Principal,
    TokenFile,
    TokenFileError,
    TokenTable,
    add_token,
    authorize,
    decide,
    token_hash,
    topology_filter,
)
from squall.daemons.nimbus.code_files import parse_ignore, skipped
from squall.daemons.nimbus.guard import ApiError, Guard
from squall.daemons.timers import FakeClock
from support.bundles import make_bundle


def bundle_names(bundle: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as tar:
        return sorted(m.name for m in tar.getmembers())


def test_authorize_matrix():
    expected = {
        # role: actions allowed on another user's topology, on the user's own, and with no topology
        "admin": (set(ACTIONS), set(ACTIONS), set(ACTIONS)),
        "user": ({SUBMIT}, {READ, READ_LOGS, CONTROL, FETCH_CODE, SUBMIT}, {READ, SUBMIT}),
        "viewer": ({READ, READ_LOGS}, {READ, READ_LOGS}, {READ, READ_LOGS}),
        # supervisors report their workers' beats; no one else does (but admin, who may do anything)
        "supervisor": ({FETCH_CODE, READ_LOGS, REPORT}, {FETCH_CODE, READ_LOGS, REPORT},
                       {FETCH_CODE, READ_LOGS, REPORT}),
    }
    for role, (others, own, none) in expected.items():
        for action in ACTIONS:
            assert authorize(role, "alice", action, "bob") == (action in others), (role, action)
            assert authorize(role, "alice", action, "alice") == (action in own), (role, action)
            assert authorize(role, "alice", action, None) == (action in none), (role, action)
    assert not authorize("root", "alice", READ, None)
    assert not authorize("admin", "alice", "delete-everything", None)
    assert not authorize("user", "", CONTROL, "")  # records without an owner belong to no user


def test_a_topology_the_caller_may_not_see_is_refused_as_missing():
    # (role, action, owner) -> status. A user asking about another user's topology gets the
    # 404 a missing topology gets; roles that see every topology get 403 for what they may not do.
    cases = {
        ("user", READ, "bob"): 404, ("user", CONTROL, "bob"): 404, ("user", FETCH_CODE, "bob"): 404,
        ("user", READ_LOGS, "bob"): 404, ("user", READ, ""): 404,  # a record without owner is nobody's
        ("user", READ, "alice"): 200, ("user", CONTROL, "alice"): 200, ("user", SUBMIT, None): 200,
        ("viewer", CONTROL, "bob"): 403, ("viewer", FETCH_CODE, "bob"): 403, ("viewer", READ, "bob"): 200,
        ("supervisor", READ, "bob"): 403, ("supervisor", FETCH_CODE, "bob"): 200,
        ("admin", CONTROL, "bob"): 200, ("viewer", SUBMIT, None): 403, ("supervisor", READ, None): 403,
        ("root", READ, "bob"): 404, ("root", READ, None): 403,
    }
    for (role, action, owner), status in cases.items():
        assert decide(role, "alice", action, owner) == status, (role, action, owner)


def test_guard_answers_a_hidden_topology_with_the_missing_text_and_counts_it():
    guard = Guard(None, Refusals(FakeClock()))
    with pytest.raises(ApiError) as info:
        guard.check(Principal("alice", "user"), CONTROL, "bob", "topology 'x'", missing="no topology named 'x'")
    assert (info.value.status, str(info.value), info.value.reason) == (404, "no topology named 'x'", "not-found")
    assert "alice" in info.value.detail  # the log says why; the client is not told
    with pytest.raises(ApiError) as info:
        guard.check(Principal("val", "viewer"), CONTROL, "bob", "topology 'x'", missing="no topology named 'x'")
    assert (info.value.status, info.value.reason) == (403, "forbidden")


def test_metrics_show_a_user_only_its_own_topologies():
    owners = {"a-1": "alice", "b-1": "bob", "old-1": ""}
    asked: list[str] = []

    def owner_of(topology_id: str) -> str | None:
        asked.append(topology_id)
        return owners.get(topology_id)

    ids = ["a-1", "b-1", "old-1", "gone-1"]
    alice = topology_filter(Principal("alice", "user"), owner_of)
    assert [t for t in ids + ids if alice(t)] == ["a-1", "a-1"]
    assert asked == ids  # each owner looked up once per scrape
    for role in ("admin", "viewer"):
        assert all(topology_filter(Principal("v", role), owner_of)(t) for t in ids)
    assert not any(topology_filter(Principal("s", "supervisor"), owner_of)(t) for t in ids)


def test_token_table_maps_tokens_and_refuses_bad_files(tmp_path):
    path = tmp_path / "tokens.yaml"
    alice = add_token(path, "alice", "user")
    viewer = add_token(path, "val", "viewer")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert alice not in path.read_text() and token_hash(alice) in path.read_text()
    table = TokenTable.load(path)
    assert table.lookup(alice).user == "alice" and table.lookup(viewer).role == "viewer"
    assert table.lookup(alice + "x") is None and table.lookup("") is None
    bad = {
        "not a mapping": "- 1\n",
        "no list": "tokens: 3\n",
        "unknown role": "tokens: [{user: a, role: root, sha256: " + "a" * 64 + "}]\n",
        "clear token": "tokens: [{user: a, role: admin, sha256: hunter2}]\n",
        "extra key": "tokens: [{user: a, role: admin, sha256: " + "a" * 64 + ", token: x}]\n",
        "duplicate": "tokens: [{user: a, role: admin, sha256: " + "a" * 64 + "},"
                     " {user: b, role: user, sha256: " + "A" * 64 + "}]\n",
        "not yaml": "tokens: [\n",
    }
    for label, text in bad.items():
        path.write_text(text)
        with pytest.raises(TokenFileError) as info:
            TokenTable.load(path)
        assert str(path) in str(info.value), label
    with pytest.raises(TokenFileError):
        TokenTable.load(tmp_path / "missing.yaml")
    with pytest.raises(TokenFileError):
        add_token(tmp_path / "t.yaml", "a", "user", token="short")


def test_ignore_rules():
    patterns = parse_ignore("# comment\n\ndata/\n*.csv\n/notes.txt\nsub/secret.py\n")
    cases = {
        (".env", False): True, (".git", True): True, ("pkg/.hidden", False): True,
        ("__pycache__", True): True, ("m.pyc", False): True, ("x.egg-info", True): True,
        ("data", True): True, ("data", False): False, ("lib/data", True): True,
        ("a.csv", False): True, ("lib/b.csv", False): True,
        ("notes.txt", False): True, ("lib/notes.txt", False): False,
        ("sub/secret.py", False): True, ("other/sub/secret.py", False): False,
        ("main.py", False): False, ("lib/helpers.py", False): False,
    }
    for (rel, is_dir), want in cases.items():
        assert skipped(rel, is_dir, patterns) == want, rel


def test_bundle_leaves_out_dotfiles_vcs_and_ignored_files(tmp_path):
    folder = tmp_path / "app"
    (folder / ".git" / "objects").mkdir(parents=True)
    (folder / ".git" / "config").write_text("[remote]\n")
    (folder / ".env").write_text("DB_PASSWORD=secret\n")
    (folder / "lib" / ".cache").mkdir(parents=True)
    (folder / "lib" / ".cache" / "c").write_text("x")
    (folder / "lib" / "helpers.py").write_text("X = 1\n")
    (folder / "data").mkdir()
    (folder / "data" / "big.bin").write_bytes(b"\0" * 100)
    (folder / "keep.csv").write_text("a,b\n")
    (folder / ".squallignore").write_text("data/\n*.csv\n")
    names = bundle_names(make_bundle(folder, "app"))
    code = [n for n in names if n.startswith("code/")]
    assert code == ["code/lib/helpers.py", next(n for n in code if n.startswith("code/topo_"))], code
    assert not any(".env" in n or ".git" in n or "data" in n for n in names)


def test_refusal_log_lines_are_bounded_and_counts_are_not(tmp_path):
    clock = FakeClock()
    add_token(tmp_path / "tokens.yaml", "alice", "user")
    refusals = Refusals(clock)
    guard = Guard(TokenFile(tmp_path / "tokens.yaml", clock), refusals)
    with structlog.testing.capture_logs() as logs:
        for _ in range(LOGS_PER_WINDOW + 30):
            with pytest.raises(ApiError) as info:
                guard.principal({"HTTP_AUTHORIZATION": "Bearer nope"})
            refusals.refuse(info.value.reason, status=401)
        clock.advance(LOG_WINDOW_SECS)
        refusals.refuse("tls-handshake", error="no TLS handshake within 5s")
    events = [e["event"] for e in logs]
    assert events.count("request refused") == LOGS_PER_WINDOW + 1
    assert [e["count"] for e in logs if e["event"] == "requests refused without a log line"] == [30]
    assert refusals.counts() == {**dict.fromkeys(REASONS, 0), "unauthenticated": LOGS_PER_WINDOW + 30,
                                 "tls-handshake": 1}
    exported = {labels[0]: value for labels, value in refusals.series().samples["squall_http_refused"]}
    assert exported == refusals.counts()
    with pytest.raises(ValueError):
        refusals.refuse("bored")
