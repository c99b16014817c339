"""The load check both gates read before a latency verdict: what else ran on the cores, whether the speed-up
held from the first half of the latency phase to the second, which slots failed, whether a request's place
in its block biased it (the A/A twins), and the offline budget.

The A/A twins prove that a request's order and position in its block bias nothing; they cannot see a busy
machine (two identical requests are exchangeable, so their ratio centres on 1 under any load). The other
figures can: `foreign_load` is measured directly (`eval.run.load`), and `drift` compares the candidate's
paired ratio on each probe question between the two halves of the phase in time (the phase measures every
question's first block before any second one, so both halves hold the same questions). A load that arrives
half-way, or a regime that moves one setting more than the other, moves the drift; noise that hits both
halves alike does not. One function, `latency_reasons`, turns them into reasons for both gates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from eval.gate.policy import LATENCY_COLUMNS_OF as LATENCY_COLUMNS_OF
from eval.gate.policy import GatePolicy, LatencyRule
from eval.gate.policy import latency_column as latency_column
from eval.gate.statistics import aa_misses
from eval.store.load_figures import Drift, geometric_t_interval, split_half_drift

DRIFT_CONFIDENCE = 0.99
"""The confidence of the drift's interval (the check fires only when it is clear of 1 and past the tolerance)."""


class LoadCheck(BaseModel):
    """The latency phase's load figures for one baseline/candidate pair (over one run, or a sequence's runs)."""

    model_config = ConfigDict(frozen=True)

    foreign_load: float | None = None
    """Share of the machine's cores other processes used while the slots were timed (NULL: not recorded)."""
    foreign_load_p90: float | None = None
    """The same share at the 90th percentile of the slots (a burst diluted in the phase's mean shows here)."""
    cores: int | None = None
    drift: float | None = None
    """Geometric mean over probe questions of (first-half ratio / second-half ratio) of the pair's paired
    speed-up (1.0: the halves agree; NULL: fewer than two blocks per question)."""
    drift_low: float | None = None
    drift_high: float | None = None
    """The drift's Student t interval over probe questions (the check fires only when it is clear of 1)."""
    drift_n: int = 0
    """Probe questions measured in both halves."""
    paired: int = 0
    """Probe questions with a paired ratio (to tell "no drift figure" from "nothing measured")."""
    failed_slots: int = 0
    """Failed twin-0 slots of either setting."""
    lost_questions: list[str] = []
    """Probe questions whose every slot failed in either setting (their latency is unknown)."""
    offline_s: float | None = None
    """The candidate's mean offline bill per timed request (work it read but did not do: a recorded
    precompute step's compressions, index-time unit vectors); shown beside the speed-up, never in it."""
    aa: tuple[float, float, float, int] | None = None
    """The baseline's A/A twins over the same runs: ratio, interval, probe questions."""

    def drift_figure(self) -> Drift | None:
        """The drift as a `Drift` (None: not measured)."""
        if self.drift is None or self.drift_low is None or self.drift_high is None:
            return None
        return Drift(ratio=self.drift, low=self.drift_low, high=self.drift_high, n=self.drift_n)


def aa_figure(twins: Sequence[float], confidence: float) -> tuple[float, float, float, int] | None:
    """The A/A twins' figure (ratio, low, high, n) from their per-question ratios; None under two."""
    if len(twins) < 2:
        return None
    ratio, low, high = geometric_t_interval(twins, confidence)
    return ratio, low, high, len(twins)


def load_check(
    store: Any, run_ids: Sequence[str], base_hash: str, cand_hash: str, column: str, policy: GatePolicy | None = None
) -> LoadCheck:
    """The load figures of a pair over `run_ids` (their latency phases' slots), the baseline's A/A twins at the
    policy's confidence included.
    """
    load, p90, cores = store.foreign_load(run_ids)
    # The drift check withholds a verdict, so it fires on an unmistakable shift only: a 99 % interval. On the
    # demo's quiet phase (20 probes, 2 blocks) two 95 % intervals just missed 1 (0.894x [0.793, 0.988]).
    drift = split_half_drift(store.block_ratios(run_ids, base_hash, cand_hash, column), DRIFT_CONFIDENCE)
    failed_b, lost_b = store.failed_slots(run_ids, base_hash)
    failed_c, lost_c = store.failed_slots(run_ids, cand_hash)
    twins = [r for run in run_ids for r in store.slot_pairs(run, base_hash, 0, run, base_hash, 1, column).values()]
    aa = aa_figure(twins, policy.confidence if policy else 0.95)
    paired = sum(len(store.slot_pairs(run, base_hash, 0, run, cand_hash, 0, column)) for run in run_ids)
    return LoadCheck(
        foreign_load=load,
        foreign_load_p90=p90,
        cores=cores,
        drift=drift.ratio if drift else None,
        drift_low=drift.low if drift else None,
        drift_high=drift.high if drift else None,
        drift_n=drift.n if drift else 0,
        paired=paired,
        failed_slots=failed_b + failed_c,
        lost_questions=sorted(set(lost_b) | set(lost_c)),
        offline_s=store.offline_bill(run_ids, cand_hash),
        aa=aa,
    )


def latency_reasons(check: LoadCheck, lat: LatencyRule) -> tuple[list[str], list[str]]:
    """Why the latency may not be judged (UNDECIDED), and why it fails whatever the speed-up (FAIL): the one
    rule both gates apply. Empty lists: the speed-up may decide.
    """
    metric, blocked, failed = lat.metric, [], []
    if check.lost_questions:
        blocked.append(
            f"{metric}: no latency verdict: {len(check.lost_questions)} probe question(s) failed in every timed "
            f"slot (e.g. {check.lost_questions[:3]}; {check.failed_slots} failed slots in all); their latency is "
            "unknown, and leaving them out would judge the easiest questions (see latency_slots.error)"
        )
    worst = max((x for x in (check.foreign_load, check.foreign_load_p90) if x is not None), default=None)
    if worst is not None and worst > lat.max_foreign_load:
        blocked.append(
            f"{metric}: no latency verdict: other processes used {check.foreign_load or 0:.0%} of the "
            f"{check.cores} cores while the latency phase ran ({worst:.0%} at the 90th percentile of its slots; "
            f"the policy's limit: {lat.max_foreign_load:.0%}); rerun on a quiet machine"
        )
    drift = check.drift_figure()
    if drift is not None and drift.fires(lat.drift_tolerance):
        blocked.append(
            f"{metric}: no latency verdict: the speed-up moved {drift.ratio:.3f}x [{drift.low:.3f}, {drift.high:.3f}] "
            f"from the first half of the latency phase to the second over {drift.n} probe questions (tolerance "
            f"{lat.drift_tolerance:.0%}): the machine changed while it was measured"
        )
    elif drift is None and check.paired:
        blocked.append(
            f"{metric}: no latency verdict: one block per probe question leaves the split-half check nothing to "
            "compare (sweep with probe_repeats 2 or more)"
        )
    if check.aa is not None and aa_misses(check.aa[:3], lat.tolerance):
        aa = check.aa
        blocked.append(
            f"{metric}: no latency verdict: the A/A twins read {aa[0]:.3f}x [{aa[1]:.3f}, {aa[2]:.3f}] for two "
            f"identical requests, missing 1 by more than the tolerance {lat.tolerance:g}: a request's place in its "
            "block biased its time"
        )
    if lat.max_offline_s is not None and (check.offline_s or 0.0) > lat.max_offline_s:
        failed.append(
            f"{metric}: the candidate's requests read {check.offline_s:.3f} s of precomputed work each, over the "
            f"policy's offline budget of {lat.max_offline_s:g} s (fail)"
        )
    return blocked, failed
