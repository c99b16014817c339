"""The results schema: tables generated from the row models, analyst views, and the version that follows
from them (columns are only ever appended, so the column count only grows).
"""

from __future__ import annotations

import datetime as dt
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from eval.store.rows import (
    ClaimRow,
    FamilyVerdictRow,
    GateDecisionRow,
    GateLookRow,
    LatencySlotRow,
    QuestionRow,
    RecommendationRow,
    RunRow,
    SampleRow,
    SettingRow,
)

STORAGE_COMPATIBILITY = "v1.0.0"
"""DuckDB file format written for new stores: readable by every DuckDB CLI since 1.0, not only by the
Python package that wrote it (duckdb 2.x writes a format 1.x cannot open by default)."""

TABLES: dict[str, type[BaseModel]] = {
    "runs": RunRow,
    "settings": SettingRow,
    "questions": QuestionRow,
    "samples": SampleRow,
    "claims": ClaimRow,
    "gate_decisions": GateDecisionRow,
    "gate_looks": GateLookRow,
    "latency_slots": LatencySlotRow,
    "recommendations": RecommendationRow,
    "family_verdicts": FamilyVerdictRow,
}

_SQL_TYPES: dict[Any, str] = {str: "VARCHAR", int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN", dt.datetime: "TIMESTAMP"}

COMPRESSION_AXES = ("compressor", "target_ratio")
"""The setting axes that say how the context is compressed."""
BASELINE_AXES = tuple(
    name
    for name in SettingRow.model_fields
    if name not in ("run_id", "setting_hash", "setting_name", "setting_json", "models_sha256", *COMPRESSION_AXES)
)
"""The setting axes a compressed setting shares with its baseline: every axis but the compression ones (the
settings table has one column per axis). The baseline of a compressed setting is the uncompressed setting of
the same run that matches it on all of these; the engine and every other component are the run's, so the run
matches them. The gate and `v_break_even` both pair by this rule."""


def baseline_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a setting's row shares with its baseline (a NULL axis matches only NULL, as in the views)."""
    return tuple(row[axis] for axis in BASELINE_AXES)


def _same_baseline(a: str, b: str) -> str:
    """SQL: the rows aliased `a` and `b` agree on every baseline axis (NULL matching NULL)."""
    return " AND ".join(f"{a}.{axis} IS NOT DISTINCT FROM {b}.{axis}" for axis in BASELINE_AXES)


def _agreement(other: str, extra: str = "") -> str:
    """Per run and setting, the rule checker's `supported` against another verdict column of `claims` (the
    LLM judge's, the model verifier's) over the claims both decided: n_claims, agreement, both sides' share
    called supported (the second named like its column), `extra` columns, and Cohen's kappa.
    """
    return f"""
WITH c AS (
    SELECT run_id, setting_hash, count(*) AS n_claims,
           avg((supported = {other})::DOUBLE) AS agreement,
           avg(supported::DOUBLE) AS checker_supported, avg({other}::DOUBLE) AS {other}{extra}
    FROM claims WHERE {other} IS NOT NULL GROUP BY run_id, setting_hash)
SELECT *, (agreement - (checker_supported * {other} + (1 - checker_supported) * (1 - {other})))
          / nullif(1 - (checker_supported * {other} + (1 - checker_supported) * (1 - {other})), 0)
          AS kappa
FROM c"""


VIEWS = {
    "v_leaderboard": """
SELECT run_id, setting_name, setting_hash, any_value(retrieval) AS retrieval, any_value(reranker) AS reranker,
       any_value(compressor) AS compressor, any_value(target_ratio) AS target_ratio, any_value(top_k) AS top_k,
       any_value(layout) AS layout,
       count(*) AS n, count(*) FILTER (WHERE status <> 'ok') AS n_failed,
       avg(answer_contains) FILTER (WHERE answerable) AS answer_contains,
       avg(answer_exact_match) FILTER (WHERE answerable) AS answer_exact_match,
       avg(answer_token_f1) FILTER (WHERE answerable) AS answer_token_f1,
       avg(answer_token_recall) FILTER (WHERE answerable) AS answer_token_recall,
       avg(context_answer_recall) FILTER (WHERE answerable) AS context_answer_recall,
       avg(context_token_recall) FILTER (WHERE answerable) AS context_token_recall,
       avg(faithfulness) AS faithfulness,
       avg(ragas_faithfulness) AS ragas_faithfulness,
       avg(abstained::DOUBLE) FILTER (WHERE NOT answerable) AS abstention_unanswerable,
       avg(abstained::DOUBLE) FILTER (WHERE answerable) AS abstention_answerable,
       avg(retrieval_recall) AS retrieval_recall,
       avg(candidate_recall) AS candidate_recall,
       avg(answer_contains) FILTER (WHERE answerable) AS answer_contains_answerable,
       quantile_cont(ttft_s, 0.5) AS ttft_p50_s,
       quantile_cont(ttft_s, 0.95) AS ttft_p95_s,
       avg(prompt_tokens) AS mean_prompt_tokens,
       avg(cached_tokens) AS mean_cached_tokens,
       sum(context_tokens_in)::DOUBLE / nullif(sum(context_tokens_out), 0) AS realized_ratio,
       avg(ratio_gap) AS mean_ratio_gap,
       avg(compress_seconds) AS mean_compress_s,
       quantile_cont(probe_ttft_s, 0.5) AS probe_ttft_p50_s,
       quantile_cont(probe_ttft_s, 0.95) AS probe_ttft_p95_s,
       quantile_cont(e2e_latency_s, 0.5) AS e2e_latency_p50_s,
       avg(compress_cold_seconds) AS mean_compress_cold_s,
       quantile_cont(e2e_cold_s, 0.5) AS e2e_cold_p50_s,
       quantile_cont(e2e_cold_s, 0.95) AS e2e_cold_p95_s,
       count(e2e_cold_s) AS n_latency,
       count(*) FILTER (WHERE ragas_status LIKE 'error%') AS n_judge_errors,
       count(answer_token_recall) FILTER (WHERE answerable) AS n_answerable,
       stddev_samp(answer_token_recall) FILTER (WHERE answerable) AS answer_token_recall_sd,
       avg(schema_valid::DOUBLE) AS schema_valid_rate,
       avg(citation_precision) AS citation_precision,
       avg(citation_recall) AS citation_recall,
       avg((cache_hit_of IS NOT NULL)::DOUBLE) AS answer_cache_hit_rate,
       avg(faithfulness_model) AS faithfulness_model,
       any_value(output) AS output, any_value(answer_cache) AS answer_cache,
       avg(offline_s) FILTER (WHERE e2e_cold_s IS NOT NULL) AS mean_offline_s
FROM samples GROUP BY run_id, setting_name, setting_hash""",
    # A setting is on the frontier when no other setting of the run is at least as good on answer token
    # recall (the gate's answer metric) and at least as fast end to end (p50 of the whole request timed live
    # in the latency phase: retrieve + rerank + compress + TTFT), and strictly better on one of them. Batch
    # TTFT includes queueing: a throughput figure only.
    "v_pareto": """
SELECT a.* FROM v_leaderboard a
WHERE a.e2e_cold_p50_s IS NOT NULL AND a.answer_token_recall IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM v_leaderboard b
    WHERE b.run_id = a.run_id AND b.setting_hash <> a.setting_hash
      AND b.answer_token_recall >= a.answer_token_recall AND b.e2e_cold_p50_s <= a.e2e_cold_p50_s
      AND (b.answer_token_recall > a.answer_token_recall OR b.e2e_cold_p50_s < a.e2e_cold_p50_s))""",
    "v_judge_agreement": _agreement("judge_supported"),
    # The model verifier against the rule checker, per setting: agreement, kappa and the confusion counts
    # (checker verdict first: sup_sup = both supported, sup_uns = checker supported, verifier not).
    "v_verifier_agreement": _agreement(
        "model_supported",
        """,
           count(*) FILTER (WHERE supported AND model_supported) AS sup_sup,
           count(*) FILTER (WHERE supported AND NOT model_supported) AS sup_uns,
           count(*) FILTER (WHERE NOT supported AND model_supported) AS uns_sup,
           count(*) FILTER (WHERE NOT supported AND NOT model_supported) AS uns_uns,
           avg(model_prob) AS mean_model_prob""",
    ),
    # Where each compressor pays for itself. A quadratic is fitted to the run's probes, TTFT alone =
    # t0 + t1*x + t2*x^2 with x the uncached prompt tokens in thousands (least squares: the normal equations
    # solved by Cramer's rule; `runs.prefill_a/_b` keep the older fit through 0), and R is the mean of
    # retrieve + rerank (and the answer cache's lookup) over the probes of the settings that share the
    # setting's baseline axes: another retrieval, reranker or cache has another bill. With the compressor's
    # compress seconds per input token k (all three from the latency phase's slots: what each request did in
    # its slot, never a stored bill), its realized ratio r and the prompt's other tokens h, the end-to-end
    # speed-up at context length C is
    #   S(C) = (R + T(C + h)) / (R + k*C + T(C/r + h)).
    # Predicted at the setting's own context length (mean over its probe questions) beside the measured
    # speed-up: the mean e2e_cold_s of its baseline (BASELINE_AXES: the same setting without compression) over
    # its own on the probe questions both hold (a ratio of means, the model's own estimand at the mean
    # length), each the median of the slots' live times;
    # the break-even and 2x lengths are the first C of a 100-token grid up to 16,000
    # where S reaches 1 and 2 (NULL: not on that grid; beyond the longest probe the fit is extrapolated).
    "v_break_even": f"""
WITH parts AS (
    SELECT run_id, setting_hash, question_id, median(retrieve_s + rerank_s) AS rr_live,
           median(compress_s) AS compress_live
    FROM latency_slots WHERE twin = 0 AND status = 'ok' AND e2e_live_s IS NOT NULL
    GROUP BY run_id, setting_hash, question_id),
probes AS (
    -- A store from before the latency phase has no slots: its rows' stored bills stand in (their e2e_cold_s
    -- was that sum), never mixed with a live figure in one row.
    SELECT s.*, (s.prompt_tokens - coalesce(s.probe_cached_tokens, 0)) / 1000.0 AS x, s.probe_ttft_s AS y,
           coalesce(p.rr_live, s.e2e_cold_s - s.probe_ttft_s - coalesce(s.compress_cold_seconds, 0)) AS rr_live,
           CASE WHEN p.rr_live IS NULL THEN coalesce(s.compress_cold_seconds, 0) ELSE p.compress_live END
             AS compress_live
    FROM samples s LEFT JOIN parts p USING (run_id, setting_hash, question_id)
    WHERE s.status = 'ok' AND s.e2e_cold_s IS NOT NULL AND s.probe_ttft_s IS NOT NULL),
sums AS (
    SELECT run_id, count(*)::DOUBLE AS n, sum(x) AS sx, sum(x * x) AS sx2, sum(x * x * x) AS sx3,
           sum(x * x * x * x) AS sx4, sum(y) AS sy, sum(x * y) AS sxy, sum(x * x * y) AS sx2y,
           count(*) AS fit_points
    FROM probes GROUP BY run_id HAVING count(*) >= 4),
det AS (
    SELECT *,
      n * (sx2 * sx4 - sx3 * sx3) - sx * (sx * sx4 - sx3 * sx2) + sx2 * (sx * sx3 - sx2 * sx2) AS d,
      sy * (sx2 * sx4 - sx3 * sx3) - sx * (sxy * sx4 - sx3 * sx2y) + sx2 * (sxy * sx3 - sx2 * sx2y) AS d0,
      n * (sxy * sx4 - sx2y * sx3) - sy * (sx * sx4 - sx3 * sx2) + sx2 * (sx * sx2y - sxy * sx2) AS d1,
      n * (sx2 * sx2y - sx3 * sxy) - sx * (sx * sx2y - sxy * sx2) + sy * (sx * sx3 - sx2 * sx2) AS d2
    FROM sums),
fit AS (SELECT run_id, d0 / d AS t0, d1 / d AS t1, d2 / d AS t2, fit_points FROM det WHERE abs(d) > 1e-12),
cfg AS (
    SELECT run_id, setting_name, setting_hash, any_value(compressor) AS compressor,
           any_value(target_ratio) AS target_ratio,
           {", ".join(f"any_value({axis}) AS {axis}" for axis in BASELINE_AXES)},
           avg(context_tokens_in) AS context_tokens,
           sum(compress_live) / nullif(sum(context_tokens_in), 0) AS k,
           sum(context_tokens_in)::DOUBLE / nullif(sum(context_tokens_out), 0) AS r,
           avg(prompt_tokens - context_tokens_out) AS h,
           sum(rr_live) AS rr_sum,
           avg(e2e_cold_s) AS e2e_cold_mean_s, count(*) AS n_latency
    FROM probes GROUP BY run_id, setting_name, setting_hash),
rr AS (
    SELECT c.run_id, c.setting_hash, sum(o.rr_sum) / sum(o.n_latency) AS rr
    FROM cfg c JOIN cfg o ON o.run_id = c.run_id AND {_same_baseline("c", "o")}
    GROUP BY c.run_id, c.setting_hash),
m AS (
    SELECT c.*, f.t0, f.t1, f.t2, rr.rr, f.fit_points, b.setting_name AS baseline_setting,
           b.e2e_cold_mean_s AS baseline_e2e_s, pr.measured_speedup
    FROM cfg c JOIN fit f USING (run_id) JOIN rr USING (run_id, setting_hash)
    LEFT JOIN cfg b ON b.run_id = c.run_id AND b.compressor = 'none' AND {_same_baseline("c", "b")}
    LEFT JOIN (
        SELECT pc.run_id, pc.setting_hash, pb.setting_hash AS baseline_hash,
               avg(pb.e2e_cold_s) / avg(pc.e2e_cold_s) AS measured_speedup
        FROM probes pc JOIN probes pb ON pb.run_id = pc.run_id AND pb.question_id = pc.question_id
        WHERE pb.e2e_cold_s > 0 AND pc.e2e_cold_s > 0
        GROUP BY pc.run_id, pc.setting_hash, pb.setting_hash) pr
      ON pr.run_id = c.run_id AND pr.setting_hash = c.setting_hash AND pr.baseline_hash = b.setting_hash
    WHERE c.compressor <> 'none' AND c.r > 0),
curve AS (
    SELECT m.run_id, m.setting_hash, g.c,
           (m.rr + m.t0 + m.t1 * (g.c + m.h) / 1000 + m.t2 * pow((g.c + m.h) / 1000, 2))
             / nullif(m.rr + m.k * g.c + m.t0 + m.t1 * (g.c / m.r + m.h) / 1000
                      + m.t2 * pow((g.c / m.r + m.h) / 1000, 2), 0) AS s
    FROM m, (SELECT generate_series::DOUBLE AS c FROM generate_series(100, 16000, 100)) g),
marks AS (
    SELECT run_id, setting_hash, min(c) FILTER (WHERE s >= 1) AS break_even_tokens,
           min(c) FILTER (WHERE s >= 2) AS two_x_tokens, max(s) FILTER (WHERE c = 16000) AS speedup_16k
    FROM curve GROUP BY run_id, setting_hash)
SELECT m.run_id, m.setting_name, m.setting_hash, m.compressor, m.target_ratio, m.top_k,
       m.t0 AS ttft_intercept_s, m.t1 AS ttft_s_per_1k, m.t2 AS ttft_s_per_1k_squared, m.rr AS retrieve_rerank_s,
       m.fit_points, m.h AS other_prompt_tokens, m.k AS cold_s_per_token, m.r AS realized_ratio,
       m.context_tokens, m.n_latency,
       (m.rr + m.t0 + m.t1 * (m.context_tokens + m.h) / 1000 + m.t2 * pow((m.context_tokens + m.h) / 1000, 2))
         / nullif(m.rr + m.k * m.context_tokens + m.t0 + m.t1 * (m.context_tokens / m.r + m.h) / 1000
                  + m.t2 * pow((m.context_tokens / m.r + m.h) / 1000, 2), 0) AS predicted_speedup,
       m.measured_speedup,
       k.break_even_tokens, k.two_x_tokens, k.speedup_16k, m.baseline_setting,
       {", ".join(f"m.{axis}" for axis in BASELINE_AXES if axis != "top_k")}
FROM m JOIN marks k USING (run_id, setting_hash)""",
    # A run's recommendation with the figures behind it: the chosen candidate's own and adjusted p-values,
    # and how many candidates passed gated one by one against how many survived Holm's adjustment.
    "v_recommendation": """
SELECT r.run_id, r.created_at, r.verdict, r.shipped, r.recommended, r.speedup, r.speedup_ci_low,
       r.speedup_ci_high, r.answer_metric, r.answer_diff, r.answer_ci_low, r.answer_ci_high, r.k, r.procedure,
       r.level, f.p_value, f.adjusted_p, r.n_questions, r.fixed_n_questions,
       (SELECT count(*) FROM family_verdicts v WHERE v.run_id = r.run_id AND v.verdict = 'pass') AS n_pass,
       (SELECT count(*) FROM family_verdicts v WHERE v.run_id = r.run_id AND v.adjusted_verdict = 'pass')
         AS n_pass_adjusted,
       r.reasons
FROM recommendations r LEFT JOIN family_verdicts f ON f.run_id = r.run_id AND f.candidate = r.recommended""",
    "v_sample_diff": """
SELECT a.run_id, a.question_id, a.question, a.answerable,
       a.setting_name AS a_setting, b.setting_name AS b_setting,
       a.answer AS a_answer, b.answer AS b_answer,
       a.answer_contains AS a_answer_contains, b.answer_contains AS b_answer_contains,
       b.answer_contains - a.answer_contains AS answer_contains_diff,
       a.faithfulness AS a_faithfulness, b.faithfulness AS b_faithfulness,
       a.context_answer_recall AS a_context_answer_recall, b.context_answer_recall AS b_context_answer_recall,
       a.prompt_tokens AS a_prompt_tokens, b.prompt_tokens AS b_prompt_tokens,
       a.ttft_s AS a_ttft_s, b.ttft_s AS b_ttft_s,
       a.setting_hash AS a_setting_hash, b.setting_hash AS b_setting_hash, a.gold_answers,
       a.answer_token_recall AS a_answer_token_recall, b.answer_token_recall AS b_answer_token_recall,
       b.answer_token_recall - a.answer_token_recall AS answer_token_recall_diff,
       a.context_tokens_out AS a_context_tokens, b.context_tokens_out AS b_context_tokens
FROM samples a JOIN samples b USING (run_id, question_id)
WHERE a.setting_hash <> b.setting_hash""",
}


def _sql_type(annotation: Any) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = args[0]
    return _SQL_TYPES[annotation]


def columns(model: type[BaseModel]) -> list[tuple[str, str]]:
    """(name, SQL type) of a row model, in declaration order."""
    return [(name, _sql_type(f.annotation)) for name, f in model.model_fields.items()]


def schema_version() -> int:
    """The schema version: the number of columns over all tables. Columns are only appended, so a newer
    schema always has a larger version, and the version changes exactly when a row model gains a column.
    """
    return sum(len(model.model_fields) for model in TABLES.values())


SCHEMA_VERSION = schema_version()
