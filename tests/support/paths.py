"""Where the tests' files are: the repository root and the topology files tests submit or load."""
import shutil
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
REPO = SUPPORT.parents[1]
# The compose setup the compose tests check.
COMPOSE_CONF = REPO / "conf" / "compose.yaml"
COMPOSE_FILE = REPO / "docker-compose.yml"
# Small topologies the daemon tests bundle: numbers_topo.py (a counting spout, a file sink), words_topo.py.
TOPOLOGIES = SUPPORT / "topologies"
# Topologies the cluster, state and UI tests run end to end.
CLUSTER_TOPOLOGIES = SUPPORT / "cluster_topologies"
# Batch topologies the backfill tests run in local mode and on Spark.
SPARK_TOPOLOGIES = SUPPORT / "spark_topologies"
# The chaos suite's durable-ids topology.
CHAOS_TOPOLOGY = SUPPORT / "chaos_topology"
# A topology directory of its own: the worker-user test bundles the whole directory.
WORKER_USER_TOPOLOGY = SUPPORT / "worker_user_topology"
# Hostile topologies (snooping, forking, hogging memory, stuck in prepare) and two tenants
# they meet: the isolation tests.
ISOLATION_TOPOLOGIES = SUPPORT / "isolation_topologies"


def docker_compose() -> str:
    """Debian's docker-compose, which scripts/test.sh installs: the compose checks run, never skip."""
    found = shutil.which("docker-compose")
    assert found, "docker-compose is missing: scripts/test.sh installs it (apt-get install docker-compose)"
    return found
VENV_TOPOLOGY = SUPPORT / "venv_topology" / "uses_vpkg.py"
# streamparse's redis example laid out as a project (virtualenvs/wordcount_redis.txt pins
# redis==2.10.1), and the wheel of that pin, which scripts/test.sh builds once.
SP_REDIS_PROJECT = SUPPORT / "sp_redis_project"
WHEELHOUSE = SUPPORT / "wheelhouse"
