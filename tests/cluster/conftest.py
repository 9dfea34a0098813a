"""The cluster tier: a real ZooKeeper and Redis shared by the run, daemons as processes."""
from support.servers import (  # noqa: F401 (fixtures of this tier)
    cluster_conf,
    own_zk_server,
    redis_server,
    start_cluster,
    zk_client,
    zk_root,
    zk_server,
)
from support.worker_users import open_tmp_path  # noqa: F401 (a fixture of this tier)
