"""The worker daemon: one OS process per (topology, slot), running a WorkerRuntime.

``daemon`` (the process: start-up, timers, watches, shutdown), ``local_files`` (the
heartbeat, stats and metrics files it leaves its supervisor), ``decisions`` (plain
functions), ``bundle`` (the extracted code), ``zk_writer`` (ZooKeeper writes off the
hot threads), ``main`` (``worker start ...``, launched by supervisors).
"""
