"""The user API's collector protocols match what the runtime hands to spouts and bolts:
every call a protocol names exists on the runtime class with the same parameters and
defaults, so code written against the protocol runs unchanged."""
import inspect

import pytest

from squall import OutputCollector, SpoutOutputCollector
from squall.runtime.collectors import BoltCollector, SpoutCollector

MEMBERS = {SpoutOutputCollector: ["emit", "emit_direct", "report_error"],
           OutputCollector: ["emit", "emit_direct", "ack", "fail", "report_error"]}


def _params(func):
    return [(p.name, p.kind, p.default) for p in inspect.signature(func).parameters.values()]


@pytest.mark.parametrize("protocol, runtime", [(SpoutOutputCollector, SpoutCollector),
                                               (OutputCollector, BoltCollector)])
def test_runtime_collector_has_every_protocol_call_with_its_signature(protocol, runtime):
    calls = sorted(n for n, v in vars(protocol).items() if inspect.isfunction(v) and not n.startswith("_"))
    assert calls == sorted(MEMBERS[protocol])
    for name in calls:
        assert _params(getattr(runtime, name)) == _params(getattr(protocol, name)), name


def test_spout_and_bolt_hints_name_the_protocols_not_runtime_classes():
    import squall.components as components

    hints = {name: inspect.signature(getattr(components, cls).__dict__[name]).parameters["collector"].annotation
             for cls, name in [("Spout", "open"), ("Bolt", "prepare")]}
    assert hints == {"open": "SpoutOutputCollector", "prepare": "OutputCollector"}
    assert "squall.runtime" not in inspect.getsource(components)
