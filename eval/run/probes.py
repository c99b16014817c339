"""The prefill-time fit over the latency phase's probes (uncached prompt tokens against prefill seconds)."""

from __future__ import annotations

from collections.abc import Sequence


def fit_prefill(points: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """Least-squares fit of prefill seconds = a*C + b*C^2 over (uncached prompt tokens C, seconds)."""
    import numpy as np

    usable = [(c, t) for c, t in points if c > 0]
    if len({c for c, _ in usable}) < 2:
        return None
    c = np.array([p[0] for p in usable], dtype=float)
    t = np.array([p[1] for p in usable], dtype=float)
    (a, b), *_ = np.linalg.lstsq(np.stack([c, c * c], axis=1), t, rcond=None)
    return float(a), float(b)
