"""The restart policy, the line budget and where children run: plain decisions."""
import os
import sys

from squall.multilang import codedir
from squall.multilang.child import LineBudget
from squall.multilang.settings import RestartPolicy, ShellSettings


def test_restart_at_once_then_back_off_then_reset():
    p = RestartPolicy(base=0.5, cap=4.0, stable=30.0)
    assert p.next_start(100.0, lived=1.0) == 100.0
    assert [p.next_start(100.0, lived=1.0) - 100.0 for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert p.next_start(200.0, lived=60.0) == 200.0  # a child that ran long counts as new


def test_line_budget_counts_what_it_drops():
    b = LineBudget(3)
    assert [b.allow(10.0) for _ in range(5)] == [True, True, True, False, False]
    assert b.take_dropped() == 2 and b.take_dropped() == 0
    assert b.allow(11.5)  # a new second


def test_settings_from_conf():
    s = ShellSettings.from_conf({"topology.multilang.serializer": "org.apache.storm.multilang.JsonSerializer",
                                 "topology.subprocess.timeout.secs": 7})
    assert (s.serializer, s.timeout, s.max_pending) == ("json", 7.0, 100)
    assert ShellSettings.from_conf({}, "msgpack").serializer == "msgpack"


def test_scripts_named_by_a_command():
    assert codedir.script_args(["python3", "-u", "bolts/split.py", "--flag", "x"]) == ["bolts/split.py"]
    assert codedir.script_args(["node", "spout.js"]) == ["spout.js"]
    assert codedir.script_args(["streamparse_run", "bolts.wordcount.WordCountBolt"]) == []


def test_missing_files_name_component_and_path():
    shipped = {"split.py", "lib/x.js"}
    assert codedir.missing_files([("a", "split.py"), ("b", "./lib/x.js")], shipped) == []
    problems = codedir.missing_files([("a", "nope.py"), ("b", "../up.py")], shipped)
    assert "'a'" in problems[0] and "nope.py" in problems[0] and "not in the code bundle" in problems[0]
    assert "outside the topology's folder" in problems[1]


def test_child_env_puts_the_workers_interpreter_first(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin")
    env = codedir.child_env({"PATH": "/opt/tools", "FOO": "1"})
    assert env["PATH"].split(os.pathsep) == [os.path.dirname(sys.executable), "/usr/bin", "/opt/tools"]
    assert env["FOO"] == "1"


def test_child_cwd(monkeypatch, tmp_path):
    monkeypatch.setenv(codedir.CODE_DIR_ENV, str(tmp_path))
    assert codedir.child_cwd(None, True) == str(tmp_path)
    assert codedir.child_cwd("src", True) == str(tmp_path / "src")
    assert codedir.child_cwd("src", False) is None
