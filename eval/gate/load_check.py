"""The load check both gates read before a latency verdict: what else ran on the cores, whether the speed-up
held from the first half of the latency phase to the second, and which slots failed.

The A/A twins prove that a request's order and position in its block bias nothing; they cannot see a busy
machine (two identical requests are exchangeable, so their ratio centres on 1 under any load). These
figures can: `foreign_load` is measured directly (`eval.run.load`), and `drift` compares the candidate's
paired ratio on each probe question between the two halves of the phase in time (the phase measures every
question's first block before any second one, so both halves hold the same questions). A load that arrives
half-way, or a regime that moves one setting more than the other, moves the drift; noise that hits both
halves alike does not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from corpus.errors import CribsheetError
from eval.store.load_figures import split_half_drift

LATENCY_COLUMNS_OF = {
    "e2e_cold_s": "e2e_live_s",
    "e2e_latency_s": "e2e_live_s",
    "e2e_paid_s": "e2e_live_s",
    "probe_ttft_s": "ttft_s",
    "prompt_tokens": "prompt_tokens",
}
"""A policy's latency metric -> the latency phase's slot column both gates read its ratio from. A metric
without one (the batch's `ttft_s`, the stored compressor bills) is refused when a policy is loaded."""


def latency_column(metric: str) -> str:
    """The slot column of a latency metric (the one rule both gates use)."""
    try:
        return LATENCY_COLUMNS_OF[metric]
    except KeyError:
        raise CribsheetError(
            f"latency metric '{metric}' has no column in the latency phase's slots; use one of "
            f"{sorted(LATENCY_COLUMNS_OF)}"
        ) from None


class LoadCheck(BaseModel):
    """The latency phase's load figures for one baseline/candidate pair (over one run, or a sequence's runs)."""

    model_config = ConfigDict(frozen=True)

    foreign_load: float | None = None
    """Share of the machine's cores other processes used while the slots were timed (NULL: not recorded)."""
    cores: int | None = None
    drift: float | None = None
    """Geometric mean over probe questions of (first-half ratio / second-half ratio) of the pair's paired
    speed-up (1.0: the halves agree; NULL: fewer than two blocks per question)."""
    drift_n: int = 0
    """Probe questions measured in both halves."""
    failed_slots: int = 0
    """Failed twin-0 slots of either setting."""
    lost_questions: list[str] = []
    """Probe questions whose every slot failed in either setting (their latency is unknown)."""
    offline_s: float | None = None
    """The candidate's mean offline bill per timed request (work it read but did not do: a recorded
    precompute step's compressions, index-time unit vectors); shown beside the speed-up, never in it."""


def load_check(store: Any, run_ids: Sequence[str], base_hash: str, cand_hash: str, column: str) -> LoadCheck:
    """The load figures of a pair over `run_ids` (their latency phases' slots)."""
    load, cores = store.foreign_load(run_ids)
    drift, n = split_half_drift(store.block_ratios(run_ids, base_hash, cand_hash, column))
    failed_b, lost_b = store.failed_slots(run_ids, base_hash)
    failed_c, lost_c = store.failed_slots(run_ids, cand_hash)
    return LoadCheck(
        foreign_load=load,
        cores=cores,
        drift=drift,
        drift_n=n,
        failed_slots=failed_b + failed_c,
        lost_questions=sorted(set(lost_b) | set(lost_c)),
        offline_s=store.offline_bill(run_ids, cand_hash),
    )


def check_reasons(check: LoadCheck, max_foreign_load: float, drift_tolerance: float, metric: str) -> list[str]:
    """Why the latency may not be judged (empty: it may): slots lost, a busy machine, halves that disagree."""
    reasons = []
    if check.lost_questions:
        reasons.append(
            f"{metric}: no latency verdict: {len(check.lost_questions)} probe question(s) failed in every timed "
            f"slot (e.g. {check.lost_questions[:3]}; {check.failed_slots} failed slots in all); their latency is "
            "unknown, and leaving them out would judge the easiest questions (see latency_slots.error)"
        )
    if check.foreign_load is not None and check.foreign_load > max_foreign_load:
        reasons.append(
            f"{metric}: no latency verdict: other processes used {check.foreign_load:.0%} of the "
            f"{check.cores} cores while the latency phase ran (the policy's limit: {max_foreign_load:.0%}); "
            "rerun on a quiet machine"
        )
    if check.drift is not None and abs(math.log(check.drift)) > math.log1p(drift_tolerance):
        reasons.append(
            f"{metric}: no latency verdict: the speed-up moved {check.drift:.3f}x from the first half of the "
            f"latency phase to the second over {check.drift_n} probe questions (tolerance {drift_tolerance:.0%}): "
            "the machine changed while it was measured"
        )
    return reasons


def load_text(check: LoadCheck | None) -> str:
    """The load figures in a few words, for a verdict line and a report cell."""
    if check is None:
        return "load not measured"
    load = f"foreign load {check.foreign_load:.1%}" if check.foreign_load is not None else "foreign load n/a"
    drift = f"drift {check.drift:.3f}x" if check.drift is not None else "drift n/a"
    failed = f", {check.failed_slots} failed slots" if check.failed_slots else ""
    offline = f", offline bill {check.offline_s:.3f} s/request (not in the speed-up)" if check.offline_s else ""
    return f"{load}, {drift}{failed}{offline}"
