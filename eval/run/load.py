"""What else ran on the machine while a latency slot was timed: the CPU seconds other processes used.

The A/A twins cannot see a busy machine (two identical requests are exchangeable, so their ratio centres on
1 however loaded the cores are). This meter reads it directly, as benchmark harnesses do (pyperf stores the
load average with every result): the busy CPU time over the slot minus the CPU time of this process and its
children (the vLLM engine core, a tokenizer pool) over the same slot. What is left is foreign load: another
job, a noisy neighbour, a test suite on the same cores.

Where the busy time comes from: inside a cgroup v2 container with a CPU controller (the process's cgroup is
not the root), the container's own `cpu.stat` usage, over the CPUs the container may use (its `cpu.max`
quota or its CPU affinity): another job in the container counts, other containers on the host do not (they
show as slower requests, not as foreign load). Elsewhere, the host's counters (psutil's system-wide CPU
times, less guest time, which the kernel already counts in user time) over the CPUs this process may run on.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _busy_host() -> float:
    """Busy CPU seconds of the whole host: everything but idle and I/O wait, guest time not counted twice."""
    import psutil

    t = psutil.cpu_times()
    total = sum(float(v) for v in t)
    # Linux counts guest time in user and guest_nice in nice already (psutil subtracts them the same way).
    twice = float(getattr(t, "guest", 0.0)) + float(getattr(t, "guest_nice", 0.0))
    return total - twice - float(t.idle) - float(getattr(t, "iowait", 0.0))


def _cgroup_dir() -> Path | None:
    """The cgroup v2 folder of this process when it is a container's own (not the root) with CPU accounting."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    unified = [line.split(":", 2)[2] for line in lines if line.startswith("0::")]
    if not unified or unified[0] in ("", "/"):
        return None
    folder = CGROUP_ROOT / unified[0].lstrip("/")
    return folder if (folder / "cpu.stat").is_file() else None


def _cgroup_busy(folder: Path) -> float:
    """CPU seconds the cgroup used so far (`cpu.stat` usage_usec)."""
    for line in (folder / "cpu.stat").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) / 1e6
    raise OSError(f"{folder / 'cpu.stat'}: no usage_usec")


def usable_cores(folder: Path | None = None) -> int:
    """The CPUs this process may use: its affinity, capped by a cgroup v2 `cpu.max` quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if folder is not None:
        try:
            quota, _, period = (folder / "cpu.max").read_text().strip().partition(" ")
            if quota != "max":
                cores = min(cores, max(1, math.ceil(int(quota) / int(period or "100000"))))
        except (OSError, ValueError):
            pass
    return max(1, cores)


@dataclass
class LoadMeter:
    """Measures foreign CPU seconds over a span: `start()`, then `foreign(mark)` with the mark it returned."""

    cgroup: Path | None = field(default_factory=_cgroup_dir)
    """The container's cgroup v2 folder whose usage is the busy time (None: the host's counters)."""
    cores: int = 0
    """The CPUs the busy time is shared by (0: found from the cgroup or the affinity)."""

    def __post_init__(self) -> None:
        self.cores = self.cores or usable_cores(self.cgroup)

    @property
    def source(self) -> str:
        """Where the busy time comes from: `cgroup` or `host`."""
        return "cgroup" if self.cgroup is not None else "host"

    def _busy(self) -> float:
        return _cgroup_busy(self.cgroup) if self.cgroup is not None else _busy_host()

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
        """The counters now: the busy seconds and this process tree's."""
        return self._busy(), self._own()

    def foreign(self, mark: tuple[float, dict[int, float]]) -> float:
        """CPU seconds that processes outside this tree used since `mark` (never below 0: the two counters
        tick at different granularities).
        """
        busy0, own0 = mark
        busy1, own1 = self._busy(), self._own()
        # A child born in the span counts whole; one that died in it is lost (rare: engines live for the run).
        own = sum(t - own0.get(pid, 0.0) for pid, t in own1.items())
        return max(0.0, (busy1 - busy0) - own)


def load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def own_cpu_seconds(meter: LoadMeter | None = None) -> float:
    """CPU seconds this process and its children used so far (what a precompute step measures)."""
    return sum((meter or LoadMeter(cgroup=None, cores=1))._own().values())
