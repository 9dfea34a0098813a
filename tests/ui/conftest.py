"""The UI tier: headless Chromium and Prometheus against a real cluster on the run's ZooKeeper."""
from support.servers import start_cluster, zk_root, zk_server  # noqa: F401 (fixtures of this tier)
