"""The supervisor daemon: one per host; runs, watches, restarts and kills its workers.

``daemon`` (the loop), ``slot`` (the per-port state machine, plain code), ``downloads``
(code bundles from nimbus), ``processes`` (launched workers: records, liveness, signals),
``main`` (``squall supervisor``).
"""
