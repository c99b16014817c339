"""The release gate: is the candidate setting no worse than the baseline, and as fast as it promises?

Paired per question, bootstrap confidence intervals (scipy.stats.bootstrap) on the mean difference of each
gated metric, a non-inferiority margin per metric from a versioned policy, and a three-way answer:
pass (0), fail (1), could not decide (2: errors, too few questions, mismatched inputs, or a confidence
interval too wide to tell at this margin).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from corpus.errors import CribsheetError
from eval.metrics import DIRECTIONS

PASS, FAIL, UNDECIDED = 0, 1, 2


class MetricRule(BaseModel):
    """One gated metric: candidate may be worse by at most `margin` (absolute units of the metric)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    margin: float = Field(ge=0.0)
    advisory: bool = False
    """Reported, never decides."""


class LatencyRule(BaseModel):
    """The candidate must be at least `min_speedup` times faster (1.0: hold), at the lower confidence bound."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: str = "ttft_s"
    min_speedup: float = Field(default=1.0, gt=0.0)
    tolerance: float = Field(default=0.05, ge=0.0, lt=1.0)


class GatePolicy(BaseModel):
    """A versioned gate policy file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = 1
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    resamples: int = Field(default=10_000, ge=100)
    seed: int = 0
    min_questions: int = Field(default=30, ge=2)
    metrics: list[MetricRule] = Field(default_factory=lambda: [MetricRule(name="answer_contains", margin=0.02)])
    latency: LatencyRule | None = Field(default_factory=LatencyRule)

    @classmethod
    def load(cls, path: Path) -> GatePolicy:
        """Read a YAML policy; errors name the file."""
        import yaml

        try:
            raw = yaml.safe_load(Path(path).read_text())
            policy = cls.model_validate(raw)
        except FileNotFoundError:
            raise CribsheetError(f"{path}: policy file not found") from None
        except (yaml.YAMLError, ValueError) as exc:
            first = str(exc).splitlines()[0:3]
            raise CribsheetError(f"{path}: invalid gate policy: {' '.join(first)}") from None
        unknown = [m.name for m in policy.metrics if m.name not in DIRECTIONS]
        if policy.latency and policy.latency.metric not in DIRECTIONS:
            unknown.append(policy.latency.metric)
        if unknown:
            raise CribsheetError(f"{path}: unknown metric(s) {unknown}; known: {sorted(DIRECTIONS)}")
        return policy

    def sha256(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()


class MetricResult(BaseModel):
    """Everything behind one metric's verdict."""

    name: str
    higher_is_better: bool
    n: int
    baseline_mean: float
    candidate_mean: float
    diff: float
    """candidate - baseline, in the metric's own units."""
    ci_low: float
    ci_high: float
    margin: float
    advisory: bool
    verdict: str
    """pass | fail | undecided"""


class LatencyResult(BaseModel):
    """Speed-up = baseline mean / candidate mean, with its confidence interval."""

    metric: str
    n: int
    baseline_mean: float
    candidate_mean: float
    speedup: float
    ci_low: float
    ci_high: float
    min_speedup: float
    verdict: str


class GateDecision(BaseModel):
    """The gate's answer with every number behind it."""

    decision: str
    """pass | fail | undecided"""
    exit_code: int
    reasons: list[str]
    baseline: str
    candidate: str
    baseline_run: str
    candidate_run: str
    n_questions: int
    metrics: list[MetricResult] = Field(default_factory=list)
    latency: LatencyResult | None = None
    policy: GatePolicy
    created_at: dt.datetime = Field(default_factory=lambda: dt.datetime.now(dt.UTC))


def bootstrap_ci(stat: Any, data: tuple[np.ndarray, ...], policy: GatePolicy) -> tuple[float, float]:
    """Two-sided CI of `stat` over paired resamples (BCa; percentile when BCa is degenerate)."""
    from scipy.stats import bootstrap

    if all(np.all(d == d[0]) for d in data):
        value = float(stat(*data))
        return value, value
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():  # a degenerate BCa interval is expected here: we fall back to percentile
            warnings.simplefilter("ignore")
            res = bootstrap(
                data,
                stat,
                paired=True,
                vectorized=False,
                confidence_level=policy.confidence,
                n_resamples=policy.resamples,
                method=method,
                rng=np.random.default_rng(policy.seed),
            )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if np.isfinite(low) and np.isfinite(high):
            return low, high
    raise CribsheetError("bootstrap produced no finite confidence interval")


def judge_metric(rule: MetricRule, base: np.ndarray, cand: np.ndarray, policy: GatePolicy) -> MetricResult:
    """Non-inferiority of one metric on paired values."""
    higher = DIRECTIONS[rule.name]
    low, high = bootstrap_ci(lambda b, c: float(np.mean(c) - np.mean(b)), (base, cand), policy)
    # Improvement in the metric's good direction: for lower-is-better metrics flip the sign.
    imp_low, imp_high = (low, high) if higher else (-high, -low)
    if imp_low >= -rule.margin:
        verdict = "pass"
    elif imp_high < -rule.margin:
        verdict = "fail"
    else:
        verdict = "undecided"
    return MetricResult(
        name=rule.name,
        higher_is_better=higher,
        n=len(base),
        baseline_mean=float(np.mean(base)),
        candidate_mean=float(np.mean(cand)),
        diff=float(np.mean(cand) - np.mean(base)),
        ci_low=low,
        ci_high=high,
        margin=rule.margin,
        advisory=rule.advisory,
        verdict=verdict,
    )


def judge_latency(rule: LatencyRule, base: np.ndarray, cand: np.ndarray, policy: GatePolicy) -> LatencyResult:
    """Speed-up of the candidate, paired per question."""
    low, high = bootstrap_ci(lambda b, c: float(np.mean(b) / np.mean(c)), (base, cand), policy)
    floor = rule.min_speedup * (1 - rule.tolerance) if rule.min_speedup == 1.0 else rule.min_speedup
    verdict = "pass" if low >= floor else ("fail" if high < floor else "undecided")
    return LatencyResult(
        metric=rule.metric,
        n=len(base),
        baseline_mean=float(np.mean(base)),
        candidate_mean=float(np.mean(cand)),
        speedup=float(np.mean(base) / np.mean(cand)),
        ci_low=low,
        ci_high=high,
        min_speedup=rule.min_speedup,
        verdict=verdict,
    )


def decide(
    samples_base: dict[str, dict[str, Any]],
    samples_cand: dict[str, dict[str, Any]],
    policy: GatePolicy,
    labels: tuple[str, str, str, str],
) -> GateDecision:
    """Decision over two settings' samples keyed by question id (each a dict of column -> value)."""
    baseline, candidate, base_run, cand_run = labels

    def undecided(reason: str, n: int = 0) -> GateDecision:
        return GateDecision(
            decision="undecided",
            exit_code=UNDECIDED,
            reasons=[reason],
            baseline=baseline,
            candidate=candidate,
            baseline_run=base_run,
            candidate_run=cand_run,
            n_questions=n,
            policy=policy,
        )

    if set(samples_base) != set(samples_cand):
        only_b, only_c = sorted(set(samples_base) - set(samples_cand)), sorted(set(samples_cand) - set(samples_base))
        return undecided(
            f"question sets differ: {len(only_b)} only in baseline (e.g. {only_b[:3]}), "
            f"{len(only_c)} only in candidate (e.g. {only_c[:3]})"
        )
    ids = sorted(samples_base)
    failed = [q for q in ids if samples_base[q]["status"] != "ok" or samples_cand[q]["status"] != "ok"]
    if failed:
        return undecided(
            f"{len(failed)} question(s) failed in a setting (e.g. {failed[:3]}); rerun before gating", len(ids)
        )
    if len(ids) < policy.min_questions:
        return undecided(
            f"only {len(ids)} paired questions; the policy needs at least {policy.min_questions}", len(ids)
        )
    results, reasons = [], []
    for rule in policy.metrics:
        pairs = [
            (samples_base[q][rule.name], samples_cand[q][rule.name])
            for q in ids
            if samples_base[q].get(rule.name) is not None and samples_cand[q].get(rule.name) is not None
        ]
        if len(pairs) < policy.min_questions:
            if not rule.advisory:
                reasons.append(f"{rule.name}: only {len(pairs)} questions with a value in both settings")
            continue
        base, cand = (np.array(x, dtype=float) for x in zip(*pairs, strict=True))
        result = judge_metric(rule, base, cand, policy)
        results.append(result)
        if not rule.advisory and result.verdict != "pass":
            reasons.append(
                f"{rule.name}: {result.verdict} (diff {result.diff:+.3f}, CI [{result.ci_low:+.3f}, "
                f"{result.ci_high:+.3f}], margin {rule.margin:.3f})"
            )
    latency = None
    if policy.latency:
        lat_rule = policy.latency
        pairs = [
            (samples_base[q][lat_rule.metric], samples_cand[q][lat_rule.metric])
            for q in ids
            if (samples_base[q].get(lat_rule.metric) or 0) > 0 and (samples_cand[q].get(lat_rule.metric) or 0) > 0
        ]
        if len(pairs) < policy.min_questions:
            reasons.append(f"{lat_rule.metric}: only {len(pairs)} questions with a latency in both settings")
        else:
            base, cand = (np.array(x, dtype=float) for x in zip(*pairs, strict=True))
            latency = judge_latency(lat_rule, base, cand, policy)
            if latency.verdict != "pass":
                reasons.append(
                    f"{lat_rule.metric}: speed-up {latency.speedup:.2f}x, CI [{latency.ci_low:.2f}, "
                    f"{latency.ci_high:.2f}], needs {lat_rule.min_speedup:.2f}x ({latency.verdict})"
                )
    verdicts = [r.verdict for r in results if not r.advisory] + ([latency.verdict] if latency else [])
    if any(v == "fail" for v in verdicts):
        decision, code = "fail", FAIL
    elif reasons:
        decision, code = "undecided", UNDECIDED
    else:
        decision, code = "pass", PASS
    return GateDecision(
        decision=decision,
        exit_code=code,
        reasons=reasons or ["every gated metric passed"],
        baseline=baseline,
        candidate=candidate,
        baseline_run=base_run,
        candidate_run=cand_run,
        n_questions=len(ids),
        metrics=results,
        latency=latency,
        policy=policy,
    )


DECISION_COLUMNS = ("metric", "baseline", "candidate", "diff", "CI", "margin", "verdict")


def decision_rows(d: GateDecision) -> list[tuple[str, ...]]:
    """The decision table (one row per metric, then the latency speed-up), formatted, for every renderer."""
    rows: list[tuple[str, ...]] = [
        (
            m.name + (" (advisory)" if m.advisory else ""),
            f"{m.baseline_mean:.3f}",
            f"{m.candidate_mean:.3f}",
            f"{m.diff:+.3f}",
            f"[{m.ci_low:+.3f}, {m.ci_high:+.3f}]",
            f"{m.margin:.3f}",
            m.verdict,
        )
        for m in d.metrics
    ]
    if d.latency:
        lt = d.latency
        rows.append(
            (
                f"{lt.metric} speed-up",
                f"{lt.baseline_mean:.3f} s",
                f"{lt.candidate_mean:.3f} s",
                f"{lt.speedup:.2f}x",
                f"[{lt.ci_low:.2f}, {lt.ci_high:.2f}]",
                f">={lt.min_speedup:.2f}x",
                lt.verdict,
            )
        )
    return rows


def markdown_report(d: GateDecision) -> str:
    """The decision as a markdown document."""
    lines = [
        f"# Gate: {d.candidate} vs {d.baseline}",
        "",
        f"**Decision: {d.decision.upper()}** (exit {d.exit_code}) on {d.n_questions} paired questions; "
        f"runs {d.baseline_run} / {d.candidate_run}; policy v{d.policy.version} "
        f"({d.policy.confidence:.0%} bootstrap CI, {d.policy.resamples} resamples, seed {d.policy.seed}).",
        "",
    ]
    lines += [f"- {r}" for r in d.reasons] + ["", "| " + " | ".join(DECISION_COLUMNS) + " |", "|---" * 7 + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in decision_rows(d)]
    return "\n".join(lines) + "\n"


def decision_json(d: GateDecision) -> str:
    """Compact JSON of the metric and latency results, stored with the decision row."""
    return json.dumps(
        {"metrics": [m.model_dump() for m in d.metrics], "latency": d.latency.model_dump() if d.latency else None},
        sort_keys=True,
    )


def _resolve(store: Any, setting: str, run: str | None) -> tuple[str, str, str]:
    """(run_id, setting_hash, setting_name) of a setting given by name or hash, in `run` or the latest run."""
    rows = store.query(
        "SELECT s.run_id, s.setting_hash, s.setting_name FROM settings s JOIN runs r USING (run_id) "
        "WHERE (s.setting_name = ? OR s.setting_hash = ?) AND (? IS NULL OR s.run_id = ?) "
        "ORDER BY r.started_at DESC LIMIT 1",
        [setting, setting, run, run],
    )
    if not rows:
        where = f"run {run}" if run else "any run"
        known = store.query(
            "SELECT DISTINCT setting_name FROM settings WHERE (? IS NULL OR run_id = ?) ORDER BY 1", [run, run]
        )
        raise CribsheetError(
            f"setting '{setting}' not found in {where}; known: "
            f"{', '.join(r['setting_name'] for r in known[:20]) or 'none'}"
        )
    r = rows[0]
    return str(r["run_id"]), str(r["setting_hash"]), str(r["setting_name"])


def run_gate(
    store: Any,
    baseline: str,
    candidate: str,
    policy: GatePolicy,
    run: str | None = None,
    baseline_run: str | None = None,
    candidate_run: str | None = None,
    report_path: Path | None = None,
) -> GateDecision:
    """Gate two stored settings; writes the decision row (and the markdown report when asked)."""
    import uuid

    from eval.rows import GateDecisionRow

    base_run, base_hash, base_name = _resolve(store, baseline, baseline_run or run)
    cand_run, cand_hash, cand_name = _resolve(store, candidate, candidate_run or run or base_run)
    labels = (base_name, cand_name, base_run, cand_run)
    mismatch = None
    if base_run != cand_run:
        runs = {
            r["run_id"]: r
            for r in store.query(
                "SELECT run_id, questions_sha256, corpus_sha256, index_version FROM runs WHERE run_id IN (?, ?)",
                [base_run, cand_run],
            )
        }
        for field in ("questions_sha256", "corpus_sha256"):
            if runs[base_run][field] != runs[cand_run][field]:
                mismatch = (
                    f"runs differ in {field}: {str(runs[base_run][field])[:12]} vs "
                    f"{str(runs[cand_run][field])[:12]}; gate only runs on the same question set and corpus"
                )
                break
    if mismatch:
        decision = GateDecision(
            decision="undecided",
            exit_code=UNDECIDED,
            reasons=[mismatch],
            baseline=base_name,
            candidate=cand_name,
            baseline_run=base_run,
            candidate_run=cand_run,
            n_questions=0,
            policy=policy,
        )
    else:
        sql = "SELECT * FROM samples WHERE run_id = ? AND setting_hash = ?"
        base = {r["question_id"]: r for r in store.query(sql, [base_run, base_hash])}
        cand = {r["question_id"]: r for r in store.query(sql, [cand_run, cand_hash])}
        decision = decide(base, cand, policy, labels)
    if report_path is not None:
        Path(report_path).parent.mkdir(parents=True, exist_ok=True)
        Path(report_path).write_text(markdown_report(decision))
    store.add_decision(
        GateDecisionRow(
            decision_id=uuid.uuid4().hex[:12],
            created_at=decision.created_at,
            baseline=base_name,
            candidate=cand_name,
            baseline_hash=base_hash,
            candidate_hash=cand_hash,
            baseline_run=base_run,
            candidate_run=cand_run,
            decision=decision.decision,
            exit_code=decision.exit_code,
            reasons=json.dumps(decision.reasons),
            n_questions=decision.n_questions,
            policy_json=policy.model_dump_json(),
            policy_sha256=policy.sha256(),
            results_json=decision_json(decision),
            report_path=str(report_path) if report_path else None,
        )
    )
    return decision
