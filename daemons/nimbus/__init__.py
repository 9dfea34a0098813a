"""The nimbus daemon: accepts topologies, schedules them, watches and reassigns.

``daemon`` (the process's shell: lifecycle; it composes ``leadership``, ``heard``,
``placement``, ``deadlines``, ``rounds`` (the leader's loop), ``operations`` (writes) and
``queries`` (reads)), ``scheduler`` and ``status`` (plain code), ``api`` (the WSGI app) and
``server`` (its HTTP server), ``client`` (what CLIs and supervisors call it with), ``validate``
(submissions), ``code_store`` and ``code_sync`` (bundles), ``process`` (a nimbus child process,
for tests and tools), ``main`` (``squall nimbus``).
"""
