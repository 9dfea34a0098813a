"""A topology that reports, as an error, whether its user code can read given files
(``test.probe.paths``): run under ``supervisor.worker.user`` it must not read the daemons'."""
from squall import Spout, TopologyBuilder
from squall.testing.components import NullBolt


class Probe(Spout):
    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0
        results = []
        for path in conf.get("test.probe.paths", []):
            try:
                with open(path, "rb") as fh:
                    fh.read(1)
                results.append(f"READ {path}")
            except PermissionError:
                results.append(f"DENIED {path}")
        collector.report_error("probe: " + "; ".join(results))

    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.n])

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def topology():
    builder = TopologyBuilder()
    builder.set_spout("probe", Probe(), 1)
    builder.set_bolt("sink", NullBolt(), 1).shuffle("probe")
    return builder.build()
