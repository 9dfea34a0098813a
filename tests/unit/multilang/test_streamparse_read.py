"""streamparse Topology classes read into squall topologies (nothing runs here)."""
import shutil

import pytest
from streamparse import Bolt, Grouping, JavaBolt, Spout, Stream, TicklessBatchingBolt, Topology

from squall import config
from squall.cli.topology_source import code_root, load, pick_requirements
from squall.multilang import ShellBolt, ShellSpout
from squall.multilang.pystorm_adapter import PystormBolt, PystormSpout
from squall.multilang.streamparse_topology import build, is_streamparse_topology, project_root
from squall.topology import TopologyError


class Src(Spout):
    outputs = [Stream(["word"]), Stream(["n"], name="numbers"), Stream(["d"], name="direct", direct=True)]


class Sink(Bolt):
    outputs = ["word", "count"]


class Timed(TicklessBatchingBolt):
    outputs = ["x"]


class AllGroupings(Topology):
    config = {"topology.tick.tuple.freq.secs": 3, "topology.kryo.register": ["x"]}
    src = Src.spec(par=2)
    shuffled = Sink.spec(inputs=[src])
    fields = Sink.spec(inputs={src["default"]: Grouping.fields("word")}, par=3)
    glob = Sink.spec(inputs={src["numbers"]: Grouping.GLOBAL})
    every = Sink.spec(inputs={src["numbers"]: Grouping.ALL})
    none = Sink.spec(inputs={src["numbers"]: Grouping.NONE})
    local = Sink.spec(inputs={src["default"]: Grouping.LOCAL_OR_SHUFFLE}, config={"topology.tick.tuple.freq.secs": 1})
    direct = Sink.spec(inputs={src["direct"]: Grouping.DIRECT})
    timed = Timed.spec(inputs=[src])


def subscription(topology, bolt):
    [sub] = topology.components[bolt].inputs
    return sub.component, sub.stream, sub.grouping.kind, sub.grouping.fields


def test_groupings_parallelism_and_config():
    assert is_streamparse_topology(AllGroupings) and not is_streamparse_topology(Topology)
    topology, conf = build(AllGroupings, {})
    assert conf == {"topology.tick.tuple.freq.secs": 3, "topology.multilang.serializer": "json"}
    assert subscription(topology, "shuffled") == ("src", "default", "shuffle", None)
    assert subscription(topology, "fields") == ("src", "default", "fields", ("word",))
    assert subscription(topology, "glob")[2] == "global"
    assert subscription(topology, "every")[2] == "all"
    assert subscription(topology, "none")[2] == "none"
    assert subscription(topology, "local")[2] == "local_or_shuffle"
    assert subscription(topology, "direct")[:3] == ("src", "direct", "direct")
    assert topology.components["fields"].parallelism == 3 and topology.components["src"].parallelism == 2
    assert topology.components["src"].streams["direct"].direct
    assert topology.components["local"].config["topology.tick.tuple.freq.secs"] == 1


def test_in_process_unless_multilang_or_tickless():
    topology, _ = build(AllGroupings, {})
    src, sink, timed = (topology.components[c].instantiate() for c in ("src", "fields", "timed"))
    assert isinstance(src, PystormSpout) and src.target.endswith(":Src")
    assert isinstance(sink, PystormBolt) and sink.import_dir == "src"
    assert isinstance(timed, ShellBolt)  # threads and signals: only as a child
    topology, _ = build(AllGroupings, {"topology.streamparse.mode": "multilang"}, "msgpack")
    src, sink = topology.components["src"].instantiate(), topology.components["local"].instantiate()
    assert isinstance(src, ShellSpout)
    assert src.command == ["streamparse_run", f"-s msgpack {Src.__module__}.Src"] and src.cwd == "src"
    assert src.serializer == "msgpack"
    assert isinstance(sink, ShellBolt) and sink.tick_secs == 1  # its own tick, for the child
    assert topology.components["glob"].instantiate().tick_secs == 3  # the topology's


def test_topology_config_chooses_the_mode():
    class Own(Topology):
        config = {"topology.streamparse.mode": "multilang"}
        src = Src.spec()

    topology, conf = build(Own, {"topology.streamparse.mode": "in-process"})
    assert isinstance(topology.components["src"].instantiate(), ShellSpout)
    assert conf["topology.streamparse.mode"] == "multilang"


def test_java_components_and_groupings_are_refused():
    class WithJava(Topology):
        src = Src.spec()
        java = JavaBolt.spec(full_class_name="org.example.CountBolt", args_list=[], inputs=[src])

    with pytest.raises(TopologyError, match="java.*org.example.CountBolt"):
        build(WithJava)

    class CustomJava(Topology):
        src = Src.spec()
        sink = Sink.spec(inputs={src: Grouping.custom_object("org.example.G", [])})

    with pytest.raises(TopologyError, match="custom Java grouping"):
        build(CustomJava)


def test_per_environment_par_is_refused():
    class ByEnv(Topology):
        src = Src.spec(par={"prod": 4})

    with pytest.raises(TopologyError, match="'src': par must be an integer"):
        build(ByEnv)


def test_unknown_squall_keys_still_fail():
    class Typo(Topology):
        config = {"topology.wrokers": 2}
        src = Src.spec()

    _, conf = build(Typo)
    with pytest.raises(ValueError, match="topology.wrokers"):
        config.validate(conf)


def test_loader_reads_a_streamparse_project(sp_project):
    path = sp_project / "topologies" / "finite_wc.py"
    assert project_root(path) == sp_project and code_root(path) == sp_project
    source = load(str(path), False, None, False, {"topology.streamparse.mode": "multilang"})
    assert source.name == "finite_wc" and source.conf["test.words"] == 600 and source.root == sp_project
    assert "topology.worker.childopts" not in source.conf  # Storm-only, dropped with a warning
    words = source.topology.components["words"].instantiate()
    assert words.command == ["streamparse_run", "sp_components.Words"]


def test_a_projects_virtualenv_file_is_named_after_its_topology_file_whatever_the_name(sp_project, tmp_path):
    """As `sparse submit` reads virtualenvs/<topology>.txt: a topology submitted under another
    --name still gets its environment (it was silently left without one)."""
    project = tmp_path / "project"
    shutil.copytree(sp_project, project)
    (project / "virtualenvs").mkdir()
    (project / "virtualenvs" / "finite_wc.txt").write_text("redis==2.10.1\n")
    (project / "requirements.txt").write_text("six\n")
    source = load(str(project / "topologies" / "finite_wc.py"), False, None, False, {})
    conf = {"topology.name": "another-name"}
    shipped = ["config.json", "virtualenvs/finite_wc.txt", "requirements.txt"]
    assert pick_requirements(source, conf, shipped) == "virtualenvs/finite_wc.txt"
    assert conf["topology.python.requirements"] == "virtualenvs/finite_wc.txt"
