"""Row models of what a run stores per question and setting: the sample with every metric, the claims
behind its faithfulness score, and the latency phase's timed slots.
"""

from __future__ import annotations

import datetime as dt

from eval.store.row_base import Row


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
    """The model verifier's score. `nli`: supported claims / claims (a claim counts when its best probability
    of support clears the threshold). `likelihood`: 1 when the answer as a whole is judged supported by the
    generator's own likelihoods, 0 when not. NULL: no verifier, or no claims. `faithfulness_method` names it."""
    offline_s: float | None = None
    """Offline cost this request relied on but did not do (`pruned`: the index-time seconds of its units'
    vectors, measured when the index was built): reported beside the live bill, never added to it."""
    latency_n: int | None = None
    """Latency phase: slots behind this row's latency columns (its repeats; NULL: not a probe question)."""
    latency_session: str | None = None
    """Latency phase: the measurement session that timed this row (every setting of a run shares it)."""
    faithfulness_method: str | None = None
    """What produced `faithfulness_model` ("likelihood card <sha256[:12]>", "nli:MODEL"); NULL: no verifier.
    `faithfulness` is always the rule checker's."""
    faithfulness_model_s: float | None = None
    """Seconds the model verifier spent on this answer (its setting's verifier time shared equally among the
    answers it scored), in the answers phase, never inside a timed latency slot; NULL: no verifier."""


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
    """0; 1 for a baseline's second request in the block (the A/A twins)."""
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
    lik_mean: float | None = None
    """Likelihood verifier: mean log p(token | passages, question) over the claim's content tokens (NULL: no
    likelihood verifier, or the claim has no content token)."""
    lik_p10: float | None = None
    """... its 10th percentile."""
    lik_min: float | None = None
    """... its minimum."""
    pmi_mean: float | None = None
    """Mean log p(token | passages, question) - log p(token | question): how much the passages raised it."""
    pmi_p10: float | None = None
    """... its 10th percentile (the claim's least supported tokens)."""
    pmi_min: float | None = None
    """... its minimum."""
