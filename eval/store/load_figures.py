"""The latency phase's load figures, computed from stored slots: the split-half drift of a pair's speed-up
and a run's summary (foreign load, worst drift, failed slots), with the one sentence that reports them;
`eval.gate.load_check` turns them into the gate's reasons.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from corpus.errors import CribsheetError
from eval.store.schema import baseline_key

MIN_QUESTIONS = 3
"""Fewer probe questions in both halves than this: the drift is shown, never fired (a policy's `min_probes`
is 30 by default)."""


def geometric_t_interval(ratios: Sequence[float], confidence: float) -> tuple[float, float, float]:
    """The geometric mean of positive `ratios` and Student's t interval for it (on their logs, n - 1 degrees of
    freedom): the interval of a check that withholds a verdict (the split-half drift, the A/A twins). Over a
    few probe questions a percentile bootstrap is far too narrow: its means cannot pass the extreme values,
    so over 4 questions no percentile interval covers more than 87.5 % of normal samples and a nominal 99 %
    one covered 82 % (2,000 simulated samples), and a quiet machine read as a changed one (the fault row
    noisy_neighbour, 1 run in 3). The t interval holds its level there, and nears the bootstrap's width by
    about 30 questions. Needs two ratios or more, each positive and finite (a one-line error otherwise).
    """
    from scipy.stats import t

    if len(ratios) < 2 or not all(math.isfinite(r) and r > 0 for r in ratios):
        raise CribsheetError(f"an interval of a geometric mean needs 2 or more positive, finite ratios; got {ratios!r}")
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    mean = sum(logs) / n
    spread = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1) / n)
    half = float(t.ppf(1 - (1 - confidence) / 2, n - 1)) * spread
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


class Drift(BaseModel):
    """The split-half drift of a pair's speed-up: the geometric mean over probe questions of (first-half ratio
    / second-half ratio), with Student's t interval over questions (`geometric_t_interval`).
    """

    model_config = ConfigDict(frozen=True)

    ratio: float
    low: float
    high: float
    n: int
    """Probe questions measured in both halves."""

    def fires(self, tolerance: float) -> bool:
        """Beyond 1 +/- `tolerance` and its interval clear of 1, over at least `MIN_QUESTIONS` questions (an
        interval over two cannot tell a regime from noise): a change of regime, not sampling noise.
        """
        return (
            self.n >= MIN_QUESTIONS
            and abs(math.log(self.ratio)) > math.log1p(tolerance)
            and not self.low <= 1.0 <= self.high
        )


def split_half_drift(blocks: Sequence[tuple[str, str, int, float]], confidence: float = 0.95) -> Drift | None:
    """The drift from time-ordered block ratios (session, question, repeat, ratio): each session's blocks
    (one measuring process, one clock) split into the first and the second half in time, per question the
    geometric mean ratio of each half; None when no question was measured in both halves (one block each).
    """
    diffs = _half_differences(blocks)
    if not diffs:
        return None
    if len(diffs) == 1:  # no spread to read: the interval is the point, and it never fires (MIN_QUESTIONS)
        return Drift(ratio=math.exp(diffs[0]), low=math.exp(diffs[0]), high=math.exp(diffs[0]), n=1)
    ratio, low, high = geometric_t_interval([math.exp(d) for d in diffs], confidence)
    return Drift(ratio=ratio, low=low, high=high, n=len(diffs))


def _half_differences(blocks: Sequence[tuple[str, str, int, float]]) -> list[float]:
    """Per question (per session), the mean log-ratio of its first-half blocks minus its second-half ones."""
    by_run: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for run, question, _, ratio in blocks:
        by_run[run].append((question, ratio))
    diffs = []
    for seq in by_run.values():
        half = (len(seq) + 1) // 2
        first: dict[str, list[float]] = defaultdict(list)
        second: dict[str, list[float]] = defaultdict(list)
        for i, (question, ratio) in enumerate(seq):
            (first if i < half else second)[question].append(math.log(ratio))
        for question in first.keys() & second.keys():
            a, b = first[question], second[question]
            diffs.append(sum(a) / len(a) - sum(b) / len(b))
    return diffs


class PhaseLoad(BaseModel):
    """A run's latency phase in three figures, for the run row, the terminal and the report."""

    model_config = ConfigDict(frozen=True)

    foreign_load: float | None = None
    cores: int | None = None
    load_avg: float | None = None
    """The 1-minute load average when the phase began."""
    drift: float | None = None
    """The split-half drift furthest from 1 over every compressed setting against its uncompressed twin."""
    drift_setting: str | None = None
    failed_slots: int = 0


def phase_load(store: Any, run_id: str, load_avg: float | None = None) -> PhaseLoad:
    """The load figures of a run's latency phase: foreign load, the worst split-half drift of a compressed
    setting against its uncompressed twin (same top-k, retrieval, reranker, layout, output), failed slots.
    """
    load, _, cores = store.foreign_load([run_id])
    rows = store.leaderboard(run_id)
    twins = {baseline_key(r): r["setting_hash"] for r in rows if r["compressor"] == "none"}
    worst: tuple[float, str] | None = None
    for r in rows:
        twin = twins.get(baseline_key(r))
        if r["compressor"] == "none" or twin is None:
            continue
        drift = split_half_drift(store.block_ratios([run_id], twin, r["setting_hash"]))
        if drift is not None and (worst is None or abs(math.log(drift.ratio)) > abs(math.log(worst[0]))):
            worst = (drift.ratio, str(r["setting_name"]))
    failed = sum(store.failed_slots([run_id], str(r["setting_hash"]))[0] for r in rows)
    return PhaseLoad(
        foreign_load=load,
        cores=cores,
        load_avg=load_avg,
        drift=worst[0] if worst else None,
        drift_setting=worst[1] if worst else None,
        failed_slots=failed,
    )


def phase_text(load: PhaseLoad | None) -> str:
    """One line on the load the latency phase ran under (the terminal's and the report's)."""
    if load is None:
        return "latency phase load: not measured (no probe questions)"
    parts = [
        f"other processes used {load.foreign_load:.1%} of the {load.cores} cores"
        if load.foreign_load is not None
        else "foreign load not recorded",
    ]
    if load.load_avg is not None:
        parts.append(f"load average {load.load_avg:.2f} as it began (the sweep's own work included)")
    if load.drift is not None:
        parts.append(f"split-half drift {load.drift:.3f}x at worst ({load.drift_setting})")
    if load.failed_slots:
        parts.append(f"{load.failed_slots} failed slots")
    return "latency phase load: " + "; ".join(parts)


def latency_figures(lat: Any) -> str:
    """The figures a latency verdict stands on, in a few words (a `LatencyResult` or its stored JSON): the
    foreign load, the split-half drift, failed slots, the offline bill left out of the speed-up, the A/A twins.
    """
    values: dict[str, Any] = lat if isinstance(lat, dict) else lat.model_dump()
    get = values.get
    parts = []
    if get("foreign_load") is not None:
        parts.append(f"foreign load {get('foreign_load'):.1%}")
    if get("drift") is not None:
        parts.append(f"drift {get('drift'):.3f}x")
    if get("failed_slots"):
        parts.append(f"{get('failed_slots')} failed slots")
    if get("offline_s"):
        parts.append(f"offline bill {get('offline_s'):.3f} s/request not in the speed-up")
    if get("aa_ratio") is not None:
        parts.append(f"A/A {get('aa_ratio'):.3f}x")
    return ", ".join(parts)
