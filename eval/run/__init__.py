"""A sweep and its parts: wiring components, the per-setting runner, generation batches, latency probes,
scoring, the sample draft, provenance, claiming and resuming runs, and the Ray driver.
"""
