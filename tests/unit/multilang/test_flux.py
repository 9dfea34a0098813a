"""Flux files read and built without running anything: components by class name with
constructor args, references, properties and config methods; streams; config; includes;
substitution; Storm's shell wrappers; and errors that name the file, line and key."""
import textwrap

import pytest

from squall.multilang import ShellBolt, ShellSpout, flux
from squall.multilang.flux.substitution import parse_properties, substitute
from squall.multilang.flux.wrappers import LogInfoBolt

C = "support.multilang.flux_components"


def write(tmp_path, text, name="topo.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_storm_multilang_example_maps_to_shell_components(tmp_path):
    path = write(tmp_path, """\
        name: "shell-topology"
        config:
          topology.workers: 1
          topology.tick.tuple.freq.secs: 7
        spouts:
          - id: "sentence-spout"
            className: "org.apache.storm.flux.wrappers.spouts.FluxShellSpout"
            constructorArgs:
              - ["node", "randomsentence.js"]
              - ["word"]
            parallelism: 1
        bolts:
          - id: "splitsentence"
            className: "org.apache.storm.flux.wrappers.bolts.FluxShellBolt"
            constructorArgs:
              - ["python3", "splitsentence.py"]
              - ["word"]
            parallelism: 2
            configMethods:
              - name: setNamedStream
                args: ["lengths", ["n"]]
              - name: addComponentConfig
                args: ["topology.tick.tuple.freq.secs", 5]
          - id: "log"
            className: "org.apache.storm.flux.wrappers.bolts.LogInfoBolt"
        streams:
          - name: "spout --> split"
            from: "sentence-spout"
            to: "splitsentence"
            grouping:
              type: SHUFFLE
          - from: "splitsentence"
            to: "log"
            grouping:
              type: FIELDS
              args: ["word"]
        """)
    topology, conf, name = flux.load(path)
    assert name == "shell-topology" and conf == {"topology.workers": 1, "topology.tick.tuple.freq.secs": 7}
    spout = topology.components["sentence-spout"].instantiate()
    bolt = topology.components["splitsentence"].instantiate()
    assert isinstance(spout, ShellSpout) and spout.command == ["node", "randomsentence.js"]
    assert isinstance(bolt, ShellBolt) and bolt.outputs == {"default": ["word"], "lengths": ["n"]}
    assert bolt.tick_secs == 5  # the child's ticks; the bolt's own tick is its poll
    assert isinstance(topology.components["log"].instantiate(), LogInfoBolt)
    assert topology.components["sentence-spout"].instantiate().config == {}
    # the topology's tick reaches a shell bolt without its own; its own wins
    [flux_bolt] = [c for c in (topology.components[i].instantiate() for i in topology.components)
                   if isinstance(c, ShellBolt)]
    assert flux_bolt.tick_secs == 5
    assert topology.components["splitsentence"].parallelism == 2
    [sub] = topology.components["log"].inputs
    assert (sub.component, sub.stream, sub.grouping.kind, sub.grouping.fields) == \
        ("splitsentence", "default", "fields", ("word",))


def test_python_components_args_refs_properties_methods(tmp_path):
    path = write(tmp_path, f"""\
        name: py
        components:
          - id: t1
            className: {C}.Tagger
            constructorArgs: ["red"]
          - id: t2
            className: {C}.Tagger
            constructorArgs: ["blue"]
        spouts:
          - id: words
            className: {C}.Words
            constructorArgs: [["a", "b"], "token"]
            properties:
              - name: prefix
                value: "p-"
            numTasks: 2
            parallelism: 1
        bolts:
          - id: tag
            className: {C}:Tag
            constructorArgs: [{{ref: t1}}]
            configMethods:
              - name: withTaggers
                args: [{{reflist: [t1, t2]}}]
            properties:
              - name: suffix
                value: "!"
            config:
              topology.tick.tuple.freq.secs: 2
          - id: one
            className: {C}.Tag
        streams:
          - from: words
            to: tag
            grouping: {{type: LOCAL_OR_SHUFFLE}}
          - from: tag
            to: one
            grouping:
              type: CUSTOM
              customClass:
                className: {C}.FirstTask
        """)
    topology, _, _ = flux.load(path)
    words = topology.components["words"]
    assert (words.parallelism, words.num_tasks) == (1, 2)
    spout = words.instantiate()
    assert (spout.words, spout.field, spout.prefix) == (["a", "b"], "token", "p-")
    tag = topology.components["tag"]
    bolt = tag.instantiate()
    assert [t.tag for t in bolt.taggers] == ["red", "blue"] and bolt.suffix == "!"
    assert tag.config["topology.tick.tuple.freq.secs"] == 2
    assert topology.components["one"].inputs[0].grouping.kind == "custom"


def test_topology_source(tmp_path):
    path = write(tmp_path, f"""\
        name: from-source
        topologySource:
          className: {C}.Source
          constructorArgs: [3]
        """)
    topology, _, name = flux.load(path)
    assert name == "from-source" and sorted(topology.components) == ["t", "w"]


@pytest.mark.parametrize("body, where, words", [
    ("name: x\nspouts:\n  - id: s\n    className: org.apache.storm.testing.TestWordSpout\n",
     ":4:", ["org.apache.storm.testing.TestWordSpout", "Java class"]),
    ("name: x\nspouts:\n  - id: s\n    clasName: a.B\n", ":4:", ["clasName", "unknown key"]),
    ("name: x\nspouts:\n  - id: s\n", ":3:", ["className is missing"]),
    (f"spouts:\n  - id: s\n    className: {C}.Words\n    constructorArgs: [[a]]\n    parallelism: 0\n",
     ":5:", ["parallelism", ">= 1"]),
    (f"spouts:\n  - id: s\n    className: {C}.Words\n    constructorArgs: [[a]]\nstreams:\n"
     "  - from: s\n    to: nope\n    grouping: {type: SHUFFLE}\n", ":6:", ["nope"]),
    (f"spouts:\n  - id: s\n    className: {C}.Words\n    constructorArgs: [[a]]\nbolts:\n  - id: b\n"
     f"    className: {C}.Tag\nstreams:\n  - from: s\n    to: b\n    grouping:\n      type: FIELDS\n"
     "      args: [colour]\n", ":9:", ["colour", "does not"]),
    (f"spouts:\n  - id: s\n    className: {C}.Tag\n    constructorArgs: [{{ref: ghost}}]\n", ":4:", ["ghost"]),
    ("config:\n  topology.workers: many\n", ":2:", ["topology.workers"]),
    ("streams:\n  - from: a\n    to: b\n    grouping:\n      type: SIDEWAYS\n", ":5:", ["SIDEWAYS"]),
    ("spouts: [\n", ":", ["not valid YAML"]),
    (f"spouts:\n  - id: s\n    className: {C}.Words\n    configMethods:\n      - name: fly\n", ":3:",
     ["Words"]),
])
def test_errors_name_file_line_and_key(tmp_path, body, where, words):
    path = write(tmp_path, body)
    with pytest.raises(flux.FluxError) as info:
        flux.load(path)
    text = str(info.value)
    assert text.startswith(str(path)) and where in text, text
    for w in words:
        assert w in text, text


def test_method_error_names_the_method_line(tmp_path):
    path = write(tmp_path, f"spouts:\n  - id: s\n    className: {C}.Words\n    constructorArgs: [[a]]\n"
                           "    configMethods:\n      - name: fly\n")
    with pytest.raises(flux.FluxError, match=r":6: .*no method 'fly'"):
        flux.load(path)


def test_includes_with_and_without_override(tmp_path):
    write(tmp_path, f"""\
        name: included
        config:
          topology.workers: 3
          topology.debug: true
        spouts:
          - id: s
            className: {C}.Words
            constructorArgs: [["from-include"]]
        """, "inc.yaml")
    base = f"""\
        name: main
        includes:
          - file: inc.yaml
            override: OVERRIDE
        config:
          topology.workers: 1
        spouts:
          - id: s
            className: {C}.Words
            constructorArgs: [["from-main"]]
        """
    topology, conf, name = flux.load(write(tmp_path, base.replace("OVERRIDE", "false")))
    assert name == "main" and conf == {"topology.workers": 1, "topology.debug": True}
    assert topology.components["s"].instantiate().words == ["from-main"]
    topology, conf, name = flux.load(write(tmp_path, base.replace("OVERRIDE", "true")))
    assert name == "included" and conf["topology.workers"] == 3
    assert topology.components["s"].instantiate().words == ["from-include"]


def test_missing_include_names_the_include(tmp_path):
    path = write(tmp_path, "includes:\n  - file: nowhere.yaml\n")
    with pytest.raises(flux.FluxError, match=r"topo.yaml:2: includes\[0\]: cannot read"):
        flux.load(path)


def test_substitution_from_properties_and_environment(tmp_path, monkeypatch):
    props = write(tmp_path, "# dev settings\nwords.first = alpha\nwords.all: [a, \"b\", c]\n"
                            "workers 2\nlong = one \\\n  two\n", "dev.properties")
    monkeypatch.setenv("FLUX_TEST_PREFIX", "env-")
    path = write(tmp_path, f"""\
        config:
          topology.workers: ${{workers}}
        spouts:
          - id: s
            className: {C}.Words
            constructorArgs: [["${{words.first}}", "${{words.all[1]}}", "${{long}}"]]
            properties:
              - name: prefix
                value: "${{ENV-FLUX_TEST_PREFIX}}"
        """)
    topology, conf, _ = flux.load(path, filter_file=props, env_filter=True)
    spout = topology.components["s"].instantiate()
    assert conf["topology.workers"] == 2
    assert spout.words == ["alpha", "b", "one two"] and spout.prefix == "env-"


def test_unresolved_substitution_names_line_and_variable(tmp_path):
    props = write(tmp_path, "a=1\n", "p.properties")
    path = write(tmp_path, "name: x\nconfig:\n  k: ${missing}\n")
    with pytest.raises(flux.FluxError, match=r"topo.yaml:3: missing: no such property"):
        flux.load(path, filter_file=props)
    path = write(tmp_path, "name: ${ENV-SQUALL_SURELY_UNSET_VAR}\n")
    with pytest.raises(flux.FluxError, match=r":1: ENV-SQUALL_SURELY_UNSET_VAR: environment variable"):
        flux.load(path, env_filter=True)


def test_substitution_off_leaves_text():
    assert substitute("a: ${x}\n", "f", None, None) == "a: ${x}\n"
    assert substitute("a: ${ENV-X} ${y}\n", "f", {"y": "1"}, None) == "a: ${ENV-X} 1\n"


def test_properties_escapes():
    assert parse_properties("k\\ ey = v\\tw\\u0041\n! comment\n", "p") == {"k ey": "v\twA"}


def test_topology_tick_reaches_shell_bolts_without_their_own(tmp_path):
    path = write(tmp_path, f"""\
        config:
          topology.tick.tuple.freq.secs: 7
        spouts:
          - id: s
            className: {C}.Words
            constructorArgs: [["a"]]
        bolts:
          - id: b
            className: org.apache.storm.flux.wrappers.bolts.FluxShellBolt
            constructorArgs: [["python3", "b.py"], ["x"]]
        streams:
          - from: s
            to: b
            grouping: {{type: SHUFFLE}}
        """)
    topology, _, _ = flux.load(path)
    assert topology.components["b"].instantiate().tick_secs == 7
