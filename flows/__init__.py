"""Thin Prefect flows and the `cribsheet` command line over `corpus/` and `eval/`."""
