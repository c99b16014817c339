"""Labelled sets the benchmarks build; no product code imports them."""
