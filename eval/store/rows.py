"""Typed row models of the results store: they generate the DuckDB tables (columns only ever appended)."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict


class Row(BaseModel):
    """Base of the row models: frozen, and an unknown column is an error (never silently dropped)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


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
    """A/A noise floor: geometric mean over probe questions of the baseline's first twin over its second, both
    timed in the same blocks (1.0: the machine was steady; NULL: no baseline was probed)."""
    aa_ci_low: float | None = None
    aa_ci_high: float | None = None
    """Bootstrap confidence interval of `aa_ratio` (over probe questions, the gate's confidence)."""
    aa_n: int | None = None
    """Probe questions behind the A/A figure (each question's baselines averaged first: the bootstrap unit)."""
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


class SampleRow(Row):
    """One question under one setting, with every metric, token count and latency part."""

    run_id: str
    setting_hash: str
    setting_name: str
    setting_json: str
    question_id: str
    question: str
    answerable: bool
    gold_answers: str
    """JSON list of gold answer strings."""
    top_k: int
    reranker: str
    compressor: str
    target_ratio: float
    retrieval: str | None = None
    """hybrid | vector | fts."""
    gold_rank: int | None = None
    """1-based rank of the first gold document among the reranked candidates (NULL: not retrieved or no gold)."""
    retrieval_recall: float | None = None
    """Share of gold documents among the top-k reranked chunks handed to the compressor (a query-aware
    compressor may drop some of them from the prompt; `context_answer_recall` reads the final context)."""
    candidate_recall: float | None = None
    """Share of gold documents among all retrieved candidates (before the top-k cut)."""
    layout: str | None = None
    """ranked | edges: passage order in the prompt."""
    context_chunk_ids: str | None = "[]"
    """JSON list of the prompt's chunk ids in prompt order; NULL where a compressor merged passages without
    saying which (the prompt's passages are then untitled); a failed compression: the chunk ids it was given."""
    context_text: str | None = None
    context_tokens_in: int | None = None
    context_tokens_out: int | None = None
    realized_ratio: float | None = None
    ratio_gap: float | None = None
    """(realized - requested) / requested compression ratio."""
    compress_seconds: float | None = None
    """Paid cost: compressor seconds this request spent, cache lookups included (a cache hit costs ~0)."""
    compress_calls: int | None = None
    """Compressor model invocations made for this request (0: all reused)."""
    retrieve_seconds: float | None = None
    rerank_seconds: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    ttft_s: float | None = None
    """Time to first token inside the batch (includes queueing)."""
    probe_ttft_s: float | None = None
    """TTFT of this prompt run alone after a cache reset (only for the probe sample)."""
    probe_prefill_s: float | None = None
    probe_decode_s: float | None = None
    probe_cached_tokens: int | None = None
    e2e_latency_s: float | None = None
    """retrieve + rerank + compress + probe TTFT: what building and reading the crib sheet costs."""
    answer: str | None = None
    answer_contains: float | None = None
    answer_token_recall: float | None = None
    context_answer_recall: float | None = None
    answer_exact_match: float | None = None
    answer_token_f1: float | None = None
    faithfulness: float | None = None
    """Supported claims / claims (offline checker); NULL when the answer claims nothing."""
    faithfulness_status: str | None = None
    """ok | no_claims"""
    n_claims: int | None = None
    abstained: bool | None = None
    """The answer says the context does not hold the answer."""
    ragas_faithfulness: float | None = None
    """ragas Faithfulness by the configured judge model (NULL when no judge is configured)."""
    ragas_status: str | None = None
    """ok | no_statements | error: ... (NULL when no judge is configured)."""
    status: str
    """ok | failed; a failed sample is a row with NULL metrics and an error, never a gap."""
    error: str | None = None
    compress_cold_seconds: float | None = None
    """Cold cost: what computing this sample's compression costs without any cache (each cached passage's
    cost as measured when it was computed), whatever ran before; equals the paid cost for query-aware
    compressors."""
    e2e_cold_s: float | None = None
    """The whole request timed live in the latency phase (median over its repeats of retrieve + rerank +
    compress from nothing + TTFT, `latency_slots.e2e_live_s`); stores from before the phase hold the older
    sum of a live TTFT and stored compressor bills. NULL: not a probe question."""
    e2e_paid_s: float | None = None
    """retrieve + rerank + paid compressor cost + probe TTFT: the bill of this request given the cache."""
    context_token_recall: float | None = None
    """Share of the gold answer's content tokens present in the final context (a sentence-long reference is
    matched word by word, not as one verbatim string)."""
    reused_from_run: str | None = None
    """The run this row was copied from because its inputs were unchanged (same reuse key and setting);
    NULL when computed in this run. Its latency columns are that run's measurements."""
    output: str | None = None
    """text | cited-json: the setting's answer format."""
    answer_cache: float | None = None
    """The setting's semantic answer cache threshold (NULL: no cache)."""
    schema_valid: bool | None = None
    """cited-json: the output parsed as `{answer, citations}` with every citation a passage of the prompt."""
    citations: str | None = None
    """cited-json: JSON list of the cited passage numbers (1-based, prompt order)."""
    citation_precision: float | None = None
    """cited-json: cited passages from a gold document / cited passages (NULL: none cited or no gold)."""
    citation_recall: float | None = None
    """cited-json: gold documents cited / gold documents in the context (NULL: none in the context)."""
    cache_hit_of: str | None = None
    """Answer cache hit: the earlier question whose answer was reused (NULL: answered by the engine)."""
    cache_similarity: float | None = None
    """Answer cache hit: cosine similarity to that question."""
    answer_cut: bool | None = None
    """The engine stopped at the token limit mid-answer (its last sentence is unfinished; NULL: not known)."""

    hardware_sha256: str | None = None
    """The machine that computed and timed this row (a Ray worker's, not the driver's): CPU model and flags,
    cores, GPUs, as in `runs.hardware_json`. The gate compares latency only within one machine."""
    engine_precision: str | None = None
    """The dtype of the engine that generated this row, on that machine."""
    faithfulness_model: float | None = None
    """Supported claims / claims by the model verifier (`--verifier nli:MODEL`): a claim counts when its best
    probability of support clears the verifier's threshold. NULL: no verifier, or no claims."""
    offline_s: float | None = None
    """Offline cost this request relied on but did not do (`pruned`: the index-time seconds of its units'
    vectors, measured when the index was built): reported beside the live bill, never added to it."""
    latency_n: int | None = None
    """Latency phase: slots behind this row's latency columns (its repeats; NULL: not a probe question)."""
    latency_session: str | None = None
    """Latency phase: the measurement session that timed this row (every setting of a run shares it)."""


class LatencySlotRow(Row):
    """One request of the latency phase: a setting's whole request for one probe question, timed live in its
    slot (retrieve, rerank, compress from nothing, TTFT), back to back with every other setting's request for
    the same question in one block (`eval.run.latency`).
    """

    run_id: str
    session_id: str
    """The measurement session: pairs are only ever formed within one."""
    setting_hash: str
    setting_name: str
    question_id: str
    repeat: int
    """0, 1, ...: the question's block (each block holds every setting once, the baselines twice)."""
    position: int
    """Order of this request within its block (seeded random order)."""
    twin: int
    """0; 1 for a baseline's second request in the block (the A/A noise floor)."""
    measured_at: dt.datetime
    status: str
    """ok | failed (with the error)."""
    error: str | None = None
    retrieve_s: float | None = None
    rerank_s: float | None = None
    compress_s: float | None = None
    """The compressor computing this context from nothing (its caches bypassed), with the prompt's layout."""
    ttft_s: float | None = None
    """vLLM's time to first token of the request, alone after a cache reset and the stable prefix re-warmed."""
    prefill_s: float | None = None
    decode_s: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    e2e_live_s: float | None = None
    """retrieve + rerank + compress + TTFT, all measured in this slot: the whole request, live."""
    offline_s: float | None = None
    """Work the request relied on but did not do (index-time unit vectors, a recorded precompute step's
    compressions): reported beside the live figure, never summed in."""
    hardware_sha256: str | None = None
    slot_s: float | None = None
    """Wall seconds of the whole slot (the untimed cache reset and re-warm included): the span of
    `foreign_cpu_s`."""
    foreign_cpu_s: float | None = None
    """CPU seconds that processes outside this one and its children used during the slot (another job on
    the cores): the load check reads it, as a share of `slot_s` x `cores`."""
    cores: int | None = None
    """Logical CPUs of the machine that timed the slot."""
    precomputed: bool | None = None
    """True: the request read a recorded precompute step's compressions (`cribsheet precompress`); NULL:
    its compressor computed this context live."""


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


class ClaimVerdict(Row):
    """The offline checker's verdict on one claim, with the evidence behind it (the checker returns it; the
    store keeps it as the claim's columns).
    """

    claim: str
    best_span: str
    """The context sentence (or two adjacent ones) that best supports the claim."""
    lexical: float
    """Share of the claim's content words in the best span."""
    semantic: float | None
    """Cosine similarity of claim and best span (embedder); NULL when the words alone decided (no tie between
    spans, coverage outside the band where meaning counts)."""
    numbers_ok: bool
    """Every number of the claim occurs in the best span."""
    names_ok: bool
    """Every capitalised name of the claim occurs in the best span (or in the title of its passage)."""
    supported: bool
    polarity_ok: bool | None = None
    """Negated where the aligned context clause is negated, and only there."""
    roles_ok: bool | None = None
    """Each name sits in the context clause that says what the claim says of it; two names are not exchanged;
    no number where the span has another after the same words; no two words of another sentence."""
    attributes_ok: bool | None = None
    """No superlative, ordinal, direction or comparative the aligned context clause does not have."""
    reason: str | None = None
    """Why the claim is unsupported (empty when supported)."""
    slot_ok: bool | None = None
    """Short answer to a question with a slot: the context has it between the slot's neighbours (NULL: no
    slot)."""


class _ClaimKey(Row):
    run_id: str
    setting_hash: str
    question_id: str
    claim_idx: int


class ClaimRow(ClaimVerdict, _ClaimKey):
    """Evidence behind a faithfulness score: one row per claim of an answer (key columns first, then the
    checker's verdict, then the LLM judge's when one ran).
    """

    judge_supported: bool | None = None
    """The LLM judge's entailment verdict on the claim against the whole context (NULL: no judge, or no
    usable reply; see judge_status)."""
    judge_status: str | None = None
    """ok | unparsed: <reply> | error: <message> (NULL when no judge ran)."""
    model_prob: float | None = None
    """The model verifier's best probability that the context supports the claim (NULL: no verifier)."""
    model_supported: bool | None = None
    """model_prob cleared the verifier's threshold."""
    model_window: str | None = None
    """The context window that gave model_prob."""


class GateDecisionRow(Row):
    """One release-gate decision with every number behind it."""

    decision_id: str
    created_at: dt.datetime
    baseline: str
    candidate: str
    baseline_hash: str | None = None
    candidate_hash: str | None = None
    baseline_run: str
    candidate_run: str
    decision: str
    """pass | fail | undecided"""
    exit_code: int
    reasons: str
    """JSON list of human-readable reasons."""
    n_questions: int
    policy_json: str
    policy_sha256: str
    results_json: str
    """Per metric: means, diff, CI, margin, verdict; and the latency speed-up with its CI."""
    report_path: str | None = None


class GateLookRow(Row):
    """One metric at one look of a sequential gate (`cribsheet gate --until-decided`): the anytime-valid
    bounds after n paired questions, and the verdict they gave.
    """

    sequence_id: str
    """The sequential gate's identity: the two settings, the policy, the plan (batch, budget, seed) and the
    run identity of what it sweeps (index snapshot, models, code, packages, machine, question file)."""
    look: int
    """1, 2, ...: one per batch of questions."""
    n: int
    """Paired questions (probes, for the latency metric) behind this look."""
    metric: str
    estimate: float | None = None
    """Mean paired difference (candidate - baseline; for latency: the speed-up baseline / candidate)."""
    lower: float | None = None
    upper: float | None = None
    """The confidence sequence's bounds at this look (valid at every look at once)."""
    verdict: str
    """pass | fail | continue | undecided (the budget is spent)."""
    decision: str
    """The gate's overall verdict at this look: pass | fail | continue | undecided."""
    run_id: str
    """The run that computed this look's batch of questions."""
    created_at: dt.datetime
    threshold: float | None = None
    """The decision boundary in the estimate's units: -margin (+margin for a lower-is-better metric), or
    the latency speed-up floor."""
    clipped: int | None = None
    """Latency: paired speed-ups beyond the plan's `latency_bound`, clipped (a PASS is refused while any is)."""
    n_failed: int | None = None
    """Questions drawn so far that failed in either setting (any: the gate stops UNDECIDED, as fixed-n does)."""
