"""A topology that needs ``vpkg`` (not installed where squall runs): its own requirements
file (written beside it by the test) pins a version. Its bolt reports, as an error, the
version it imported, the one a multilang child of it imports, ``$APP_LABEL``
(topology.environment) and its uid. A child ended by a signal (its worker stopped by the
supervisor, one too slow to heartbeat on a loaded machine) is reported as that, not as a result:
the relaunched worker reports again."""
import os
import subprocess

from squall import Bolt, TopologyBuilder
from squall.multilang.codedir import child_env
from squall.testing.components import FixedTupleSpout


class Probe(Bolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        try:
            import vpkg  # from the topology's environment
        except ImportError as exc:
            collector.report_error(f"no vpkg: {exc}; SQUALL_TOPOLOGY_VENV={os.environ.get('SQUALL_TOPOLOGY_VENV')}")
            raise
        child = subprocess.run(["python3", "-c", "import vpkg; print(vpkg.VERSION)"], env=child_env({}),
                               capture_output=True, text=True, timeout=60)
        if child.returncode < 0:  # its worker is being stopped (SIGTERM reaches its process group)
            collector.report_error(f"probe's child ended by signal {-child.returncode}")
            return
        collector.report_error(f"vpkg {vpkg.VERSION} child {child.stdout.strip() or child.stderr[-300:]} "
                               f"label {os.environ.get('APP_LABEL')} uid {os.getuid()} rc {child.returncode}")

    def execute(self, t):
        self.collector.ack(t)

    def declare_output_fields(self, declarer):
        pass


def topology():
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout("rows", [[1]], ["n"], reliable=False))
    b.set_bolt("probe", Probe()).shuffle("rows")
    return b.build()
