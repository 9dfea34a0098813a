"""The nimbus API's policy as plain code, without sockets: who may do what (``authorize``),
token files, the ignore rules of code bundles, and bounded refusal logging."""
from __future__ import annotations

import io
import stat
import tarfile

import pytest
import structlog
import structlog.testing

from squall.daemons.nimbus.auth import (
    ACTIONS,
    CONTROL,
    FETCH_CODE,
    READ,
    READ_LOGS,
    REPORT,
    SUBMIT,
    TokenFile,
    TokenFileError,
    TokenTable,
    add_token,
    authorize,
    token_hash,
)
from squall.daemons.nimbus.code_files import parse_ignore, skipped
from squall.daemons.nimbus.guard import REFUSAL_LOG_WINDOW_SECS, REFUSAL_LOGS_PER_WINDOW, ApiError, Guard
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
    guard = Guard(TokenFile(tmp_path / "tokens.yaml", clock), clock)
    with structlog.testing.capture_logs() as logs:
        for _ in range(REFUSAL_LOGS_PER_WINDOW + 30):
            with pytest.raises(ApiError):
                guard.principal({"HTTP_AUTHORIZATION": "Bearer nope"})
            guard.log_refusal(status=401)
        clock.advance(REFUSAL_LOG_WINDOW_SECS)
        guard.log_refusal(status=401)
    events = [e["event"] for e in logs]
    assert events.count("request refused") == REFUSAL_LOGS_PER_WINDOW + 1
    assert [e["count"] for e in logs if e["event"] == "requests refused without a log line"] == [30]
    assert guard.counts() == {"unauthenticated": REFUSAL_LOGS_PER_WINDOW + 30, "forbidden": 0, "connection": 0}
