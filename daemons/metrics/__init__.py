"""Prometheus metrics: series built from snapshots at scrape time, and where /metrics is served."""
