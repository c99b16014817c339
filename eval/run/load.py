"""What else ran on the machine while a latency slot was timed: the CPU seconds other processes used.

The A/A twins cannot see a busy machine (two identical requests are exchangeable, so their ratio centres on
1 however loaded the cores are). This meter reads it directly, as benchmark harnesses do (pyperf stores the
load average with every result): the machine's busy CPU time over the slot (psutil's system-wide counters)
minus the CPU time of this process and its children (the vLLM engine core, a tokenizer pool) over the same
slot. What is left is foreign load: another job, a noisy neighbour, a test suite on the same cores.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any


def _busy(times: Any) -> float:
    """Busy CPU seconds of a `psutil.cpu_times()` total: everything but idle and I/O wait."""
    total = sum(float(v) for v in times)
    return total - float(times.idle) - float(getattr(times, "iowait", 0.0))


@dataclass
class LoadMeter:
    """Measures foreign CPU seconds over a span: `start()`, then `foreign(mark)` with the mark it returned."""

    cores: int = field(default_factory=lambda: os.cpu_count() or 1)

    def _own(self) -> dict[int, float]:
        """CPU seconds (user + system) of this process and every descendant, by pid."""
        import psutil

        me = psutil.Process()
        out: dict[int, float] = {}
        for proc in [me, *me.children(recursive=True)]:
            try:
                t = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            out[proc.pid] = float(t.user + t.system)
        return out

    def start(self) -> tuple[float, dict[int, float]]:
        """The counters now: the machine's busy seconds and this process tree's."""
        import psutil

        return _busy(psutil.cpu_times()), self._own()

    def foreign(self, mark: tuple[float, dict[int, float]]) -> float:
        """CPU seconds that processes outside this tree used since `mark` (never below 0: the two counters
        tick at different granularities).
        """
        import psutil

        busy0, own0 = mark
        busy1, own1 = _busy(psutil.cpu_times()), self._own()
        # A child born in the span counts whole; one that died in it is lost (rare: engines live for the run).
        own = sum(t - own0.get(pid, 0.0) for pid, t in own1.items())
        return max(0.0, (busy1 - busy0) - own)


def load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None
