"""The versioned gate policy and the request that names what to gate."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from corpus.errors import CribsheetError
from eval.metrics import DIRECTIONS

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


class MetricRule(BaseModel):
    """One gated metric: candidate may be worse by at most `margin` (absolute units of the metric)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    margin: float = Field(ge=0.0)
    advisory: bool = False
    """Reported, never decides."""
    min_validity: float | None = Field(default=None, ge=0.0, le=1.0)
    """Faithfulness metrics: the balanced accuracy against readers' labels that the metric's method must have
    shown on held-out answers of the run's corpus kind (stored with the run) for the metric to decide; a
    deciding faithfulness metric must state it."""

    @model_validator(mode="after")
    def _faithfulness_bar(self) -> MetricRule:
        if self.name in ("faithfulness", "faithfulness_model") and not self.advisory and self.min_validity is None:
            raise ValueError(
                f"metric {self.name}: a deciding faithfulness metric states min_validity (e.g. 0.7), the balanced "
                "accuracy its method must have shown on this corpus kind; or mark it advisory"
            )
        return self


class LatencyRule(BaseModel):
    """The candidate must be at least `min_speedup` times faster (1.0: hold), at the lower confidence bound."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: str = "e2e_cold_s"
    min_speedup: float = Field(default=1.0, gt=0.0)
    tolerance: float = Field(default=0.05, ge=0.0, lt=1.0)
    """Relative slack under `min_speedup`: the lower bound must reach min_speedup * (1 - tolerance), for a
    demanded speed-up (1.5) as for "hold" (1.0)."""
    min_probes: int = Field(default=30, ge=2)
    """Questions with a serial latency measurement in both settings that a verdict needs (the sweep's
    `probe_questions` must reach it; fewer: undecided)."""
    max_foreign_load: float = Field(default=0.15, ge=0.0, le=1.0)
    """The largest share of the machine's cores other processes may use while the latency phase runs (CPU
    seconds they used over the slots' seconds times the cores), over the phase and at the 90th percentile of
    its slots; above it: no latency verdict."""
    max_offline_s: float | None = Field(default=None, ge=0.0)
    """An offline budget: the most seconds of precomputed work (a recorded precompute step's compressions,
    index-time vectors) the candidate's requests may read, per request on average; above it the latency
    verdict is FAIL, whatever the speed-up (None: no budget; the bill is still shown)."""
    drift_tolerance: float = Field(default=0.10, ge=0.0)
    """How far the speed-up may move from the first half of the latency phase to the second (per probe
    question, same questions in both halves): beyond 1 +/- this, no latency verdict."""


class SequentialPlan(BaseModel):
    """How the sequential gate looks: after every `batch` questions, up to `budget`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch: int = Field(default=10, ge=1)
    """Paired questions added between two looks."""
    budget: int = Field(default=3000, ge=1)
    """Most paired questions a test may use; still undecided there: undecided. With the paired differences'
    SD near 0.5 (docs/sequential.md), a candidate exactly as good as the baseline needs thousands of
    questions to clear a 0.03 margin, so the default sits at the generated set's size."""
    truncation: float = Field(default=0.5, gt=0.0, lt=1.0)
    """c: a bet against mean m is capped at c/m (up) or c/(1 - m) (down), so capital stays positive."""
    latency_bound: float = Field(default=20.0, gt=1.0)
    """B: the largest per-question speed-up or slow-down the latency test assumes; log-ratios are clipped to
    [-log B, log B] (the stated error rates hold for the clipped speed-up)."""
    grid: int = Field(default=2000, ge=10)
    """Grid intervals over the difference's range for the reported bounds (the boundary is always on it, so
    the verdict is exact; the bounds are rounded outwards to the grid)."""
    probes: int | None = Field(default=None, ge=1)
    """Probe questions per batch whose latency the batch's run measures (the first of the batch); None: every
    question of the batch. Fewer make each look cheaper; the latency test then grows by this many a look."""
    bet: Literal["adaptive", "mixture", "steady"] = "steady"
    """How the gamblers bet: `adaptive`, the approximate GRAPA bet from the values so far under a fixed
    truncation (decides small samples sooner); `steady` (the default), the same bet under a truncation that
    rises from `truncation` towards 0.95 as the values' running spread falls, so a metric whose paired
    differences are small and steady decides in tens of questions; `mixture`, an equal-weight mixture of
    constant bets (more power on average when the budget runs to thousands; slower on a few dozen).
    Measured in docs/sequential.md."""


DEFAULT_DIAGNOSTICS = ("context_token_recall",)
"""`GatePolicy.diagnostics` by default."""


class ShippedSetting(BaseModel):
    """The setting that shipped and the run it shipped on: what a scheduled sweep watches."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    setting: str
    """Its name (e.g. pruned-4x-k8-hybrid-dense): tonight's rows of it are gated against the shipped run's."""
    run: str
    """The run id it shipped on."""


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
    shipped: ShippedSetting | None = None
    """The setting in production: a sweep flow given this policy (`watch_policy`) gates tonight's rows of it
    against the shipped run's, and ends Failed, naming the metric that moved, when it got worse."""
    sequential: SequentialPlan | None = None
    """How `cribsheet gate --until-decided` looks (batch, budget); None: its defaults, or the command's flags."""
    diagnostics: list[str] = Field(default_factory=lambda: list(DEFAULT_DIAGNOSTICS))
    """Metrics reported but not deciding when a candidate is gated against the project's `shipped:` setting
    (they still decide against a compressed setting's own twin): input measures a change of top-k moves by
    construction, such as context_token_recall (fewer passages hold fewer of the reference's words even when
    the answers are as good). What decides against what ships is what a reader of the answers sees."""

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
        unknown += [name for name in policy.diagnostics if name not in DIRECTIONS]
        if policy.latency and policy.latency.metric not in DIRECTIONS:
            unknown.append(policy.latency.metric)
        if unknown:
            raise CribsheetError(f"{path}: unknown metric(s) {unknown}; known: {sorted(DIRECTIONS)}")
        if policy.latency and policy.latency.metric not in LATENCY_COLUMNS_OF:
            raise CribsheetError(
                f"{path}: latency metric '{policy.latency.metric}' has no column in the latency phase's slots; "
                f"use one of {sorted(LATENCY_COLUMNS_OF)}"
            )
        if policy.latency and DIRECTIONS[policy.latency.metric]:
            lower = sorted(k for k, higher in DIRECTIONS.items() if not higher)
            raise CribsheetError(
                f"{path}: latency metric '{policy.latency.metric}' is higher-is-better; a speed-up needs a "
                f"lower-is-better metric: {', '.join(lower)}"
            )
        return policy

    def sha256(self) -> str:
        """sha256 of the policy's canonical JSON (stored with each decision). `diagnostics` at its default is
        left out, so a policy written before it existed keeps its hash (a sequential gate's identity holds it).
        """
        default = tuple(self.diagnostics) == DEFAULT_DIAGNOSTICS
        if not any(m.min_validity is not None for m in self.metrics):  # written before it existed: same hash
            unset = {"metrics": {i: {"min_validity"} for i in range(len(self.metrics))}}
            exclude: Any = unset | ({"diagnostics": True} if default else {})
            return hashlib.sha256(self.model_dump_json(exclude=exclude).encode()).hexdigest()
        return hashlib.sha256(self.model_dump_json(exclude={"diagnostics"} if default else None).encode()).hexdigest()

    def against_shipped(self) -> GatePolicy:
        """The policy a candidate is gated with against the shipped setting: the `diagnostics` metrics advisory."""
        diagnostic = set(self.diagnostics)
        metrics = [m.model_copy(update={"advisory": True}) if m.name in diagnostic else m for m in self.metrics]
        return self.model_copy(update={"metrics": metrics})


class GateRequest(BaseModel):
    """Which two stored settings to gate, under which policy: the one definition the CLI, the flow and the
    gate share (and a `--config` file or a deployment's parameters fill).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    store_path: Path
    """DuckDB results file."""
    baseline: str
    """Baseline setting (name or hash)."""
    candidate: str
    """Candidate setting (name or hash)."""
    policy_path: Path = Path("policies/gate.yaml")
    """Gate policy YAML."""
    run: str | None = None
    """Run holding both settings (None: the latest run that has them)."""
    baseline_run: str | None = None
    """Run of the baseline, when the runs differ."""
    candidate_run: str | None = None
    """Run of the candidate, when the runs differ."""
    report_path: Path | None = None
    """Markdown report to write."""
    until_decided: bool = False
    """Sequential: sweep both settings batch by batch over `sweep_config`'s questions until the gate decides
    (anytime-valid bounds; `cribsheet gate --until-decided`) instead of gating stored rows once."""
    sweep_config: Path | None = None
    """The sweep YAML whose index, models and question file a sequential gate computes with (its grid must
    hold both settings; its store is `store_path`)."""
    batch: int | None = Field(default=None, ge=1)
    """Questions per look of a sequential gate (None: the policy's `sequential.batch`, else 10)."""
    max_questions: int | None = Field(default=None, ge=1)
    """A sequential gate's question budget (None: the policy's `sequential.budget`, else 3000)."""
    seed: int = Field(default=0, ge=0)
    """Seeds the order a sequential gate draws the questions in."""
