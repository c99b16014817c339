"""Typed row models of the results store: they generate the DuckDB tables (columns only ever appended).

The run-level rows live here (a run, its settings, its questions); the per-question rows in
`eval.store.sample_rows` (samples, claims, latency slots) and the gate's in `eval.store.gate_rows`. Every row
model is importable from here, where the schema (`eval.store.schema`) reads them.
"""

from __future__ import annotations

import datetime as dt

from eval.store.gate_rows import FamilyVerdictRow, GateDecisionRow, GateLookRow, RecommendationRow
from eval.store.row_base import Row
from eval.store.sample_rows import ClaimRow, ClaimVerdict, LatencySlotRow, SampleRow

__all__ = [
    "ClaimRow",
    "ClaimVerdict",
    "FamilyVerdictRow",
    "GateDecisionRow",
    "GateLookRow",
    "LatencySlotRow",
    "QuestionRow",
    "RecommendationRow",
    "Row",
    "RunRow",
    "SampleRow",
    "SettingRow",
]


class RunRow(Row):
    """One sweep: what ran, on which code, data and packages."""

    run_id: str
    started_at: dt.datetime
    finished_at: dt.datetime | None = None
    status: str
    """running | ok | failed | killed (its process died; the next sweep over the same inputs resumes it)"""
    error: str | None = None
    config_json: str
    config_hash: str
    git_commit: str | None = None
    git_dirty: bool | None = None
    package_versions: str
    """JSON object package -> version."""
    questions_path: str
    questions_sha256: str
    index_path: str
    index_version: int | None = None
    corpus_sha256: str | None = None
    n_questions: int
    n_settings: int
    stage_seconds: str | None = None
    """JSON object stage -> seconds."""
    warm_prefix_tokens: int | None = None
    warm_cached_tokens: int | None = None
    warm_cold_ttft_s: float | None = None
    warm_warm_ttft_s: float | None = None
    prefill_a: float | None = None
    """Fit of prefill seconds = a*C + b*C^2 over probe points (C = uncached prompt tokens)."""
    prefill_b: float | None = None
    prefill_fit_points: int | None = None
    hardware_json: str | None = None
    """JSON: CPU model, the instruction-set flags that change numerics and speed, core count, GPUs."""
    hardware_sha256: str | None = None
    """Digest of hardware_json: latency is compared across runs only when it matches."""
    engine_precision: str | None = None
    """The dtype the generator engine actually ran at (e.g. bfloat16): numerics differ across precisions."""
    judge_kappa: float | None = None
    """Cohen's kappa between the offline checker and the LLM judge over the claims both decided (NULL: no
    judge, or agreement undefined because one side gave a single verdict throughout)."""
    judge_claims: int | None = None
    """Claims that both the offline checker and the LLM judge decided (the kappa's n)."""
    fingerprint: str | None = None
    """Digest of everything that fixes the run's rows (config hash, question file, index version and corpus,
    code version and uncommitted diff, package versions, hardware): a sweep with the same fingerprint resumes
    this run when it did not finish."""
    reuse_key: str | None = None
    """Digest of what a setting's rows depend on besides the setting (the fingerprint with the grid left
    out): a later run with the same key copies a setting's rows from this run instead of computing them."""
    pid: int | None = None
    """Process that is running (or last ran) the sweep."""
    host: str | None = None
    """Machine of that process: a `running` run whose process is gone on this host is marked `killed`."""
    resumes: int | None = None
    """How many times the run was resumed after a crash (0: ran in one go)."""
    index_sha256: str | None = None
    """sha256 over the index version the sweep read: build spec, build id and every chunk (id and text)."""
    index_build_id: str | None = None
    """The build of the index (new on every full build; kept by incremental syncs)."""
    code_sha256: str | None = None
    """sha256 over the product's source files (untracked ones included; the code version without git)."""
    heartbeat_at: dt.datetime | None = None
    """Last sign of life of the process running the sweep (every 30 s): a `running` run silent for longer
    than the takeover timeout may be taken over from any machine."""
    taken_over_from: str | None = None
    """`pid@host` of the process whose silent run this one took over (NULL: never taken over)."""
    ray_options: str | None = None
    """JSON of the Ray options the settings were computed under (workers, CPUs and GPUs per worker, address);
    NULL when computed in one process. Part of the fingerprint: it shapes the latency columns."""
    verifier_kappa: float | None = None
    """Cohen's kappa between the rule checker and the model verifier over the claims both decided (NULL: no
    verifier, or undefined)."""
    verifier_claims: int | None = None
    """Claims both decided (the kappa's n)."""
    model_fingerprints: str | None = None
    """JSON object `role:model` -> sha256 of its weights files, for every model named by path or hub id
    (part of the fingerprint and reuse key: new weights under the same name are another run)."""
    probe_repeats: int | None = None
    """Latency phase: requests per setting and probe question (each in its own slot of the question's block)."""
    latency_session: str | None = None
    """Latency phase: id of the measurement session that timed this run's slots (NULL: no latency phase)."""
    aa_ratio: float | None = None
    """A/A twins: geometric mean over probe questions of the baseline's first twin over its second, both
    timed in the same blocks (1.0: the machine was steady; NULL: no baseline was probed)."""
    aa_ci_low: float | None = None
    aa_ci_high: float | None = None
    """The 95 % Student t interval of `aa_ratio` over probe questions (a percentile bootstrap in runs written
    before the load check's intervals changed, 2026-12-06)."""
    aa_n: int | None = None
    """Probe questions behind the A/A figure (each question's baselines averaged first: the interval's unit)."""
    foreign_load: float | None = None
    """Latency phase: share of the machine's cores that other processes used while its slots were timed
    (their CPU seconds over the slots' seconds times the cores; NULL: no latency phase)."""
    load_avg: float | None = None
    """Latency phase: the machine's 1-minute load average when it began."""
    latency_drift: float | None = None
    """Latency phase: the split-half drift furthest from 1 over the compressed settings (first-half /
    second-half paired speed-up against the uncompressed twin, the same questions in both halves)."""
    latency_drift_setting: str | None = None
    """The setting of `latency_drift`."""
    failed_slots: int | None = None
    """Latency phase: slots whose request failed (each stored with its error)."""
    precomputes_json: str | None = None
    """JSON list of the precompute records (`cribsheet precompress`) whose compressions this run's timed
    requests read, each with its bill (seconds per chunk, the snapshot's CPU-hours, when, which machine);
    NULL: every compressor computed its context live in its slot."""
    faithfulness_validity: str | None = None
    """JSON: per faithfulness metric the run fills (`faithfulness`: the rule checker; `faithfulness_model`: the
    verifier), the method, the corpus kind and the method's measured validity on that kind (balanced
    accuracy, AUROC and n against readers' labels on held-out answers; NULL figures: not measured), with the
    line the leaderboard, report and gate print."""


class SettingRow(Row):
    """One setting of a run, with its fields as columns (so analysts can filter without parsing JSON)."""

    run_id: str
    setting_hash: str
    setting_name: str
    setting_json: str
    top_k: int
    retrieval: str
    reranker: str
    compressor: str
    target_ratio: float
    layout: str
    output: str | None = None
    """text | cited-json."""
    answer_cache: float | None = None
    """Semantic answer cache threshold (NULL: off)."""
    models_sha256: str | None = None
    """sha256 of the fingerprints of the models this setting alone names (its reranker, compressor LM, unit
    scorer; NULL: none): with the run's reuse key, what a copy of its rows from another run must match."""


class QuestionRow(Row):
    """One question of a run."""

    run_id: str
    question_id: str
    question: str
    answers: str
    """JSON list of gold answer aliases."""
    gold_doc_ids: str
    """JSON list of gold document ids."""
    answerable: bool
