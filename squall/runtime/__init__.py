"""The runtime shared by local mode and worker processes: executors, collectors, queues,
the acker and the worker's transfer/receive paths."""
