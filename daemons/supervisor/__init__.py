"""The supervisor daemon: one per host; runs, watches, restarts and kills its workers.

``daemon`` (the shell: start-up, the loop, registration, shutdown), ``startup`` (its id,
the local dir's lock, whom workers run as, their cgroups), ``feed`` (its parts of the
assignments), ``ports`` (one slot machine per port, ticked), ``actions`` (what the slot
machines decide, carried out), ``slot`` (the per-port state machine, plain code), ``downloads``
(code bundles from nimbus), ``processes`` (launched workers: records, liveness, signals),
``main`` (``squall supervisor``).
"""
