"""Experiment side of cribsheet: settings, rerank, compress, prompt layout, generate, score, store."""
