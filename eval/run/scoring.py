"""Scoring a setting's answered samples: answer metrics, faithfulness with claim evidence, abstention,
retrieval.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from corpus.models import Hit
from eval.faithfulness.checker import ClaimChecker
from eval.faithfulness.judge import Judge
from eval.faithfulness.likelihood import AnswerItem, AnswerLikelihood, ClaimLikelihood
from eval.faithfulness.verifier import AnswerVerifier, ClaimScore, Verifier
from eval.metrics import METRICS, abstained
from eval.run.draft import AnswerScores, JudgmentPart, SampleDraft
from eval.store.rows import ClaimRow


def score_answer(answer: str, context: str, gold_answers: str | Sequence[str]) -> AnswerScores:
    """Every metric of `METRICS` for one answer (gold answers as a list or its stored JSON)."""
    golds = json.loads(gold_answers) if isinstance(gold_answers, str) else list(gold_answers)
    return AnswerScores.model_validate(
        {name: m.fn(answer if m.on == "answer" else context, golds) for name, m in METRICS.items()}
    )


def retrieval_scores(ranked: Sequence[Hit], gold: Sequence[str], k: int) -> dict[str, Any]:
    """Gold rank (1-based, over every candidate) and recall of gold documents at k and over all candidates.

    NULL when the question names no gold document: such a question cannot score retrieval.
    """
    if not gold:
        return {"gold_rank": None, "retrieval_recall": None, "candidate_recall": None}
    wanted = set(gold)
    docs = [h.doc_id for h in ranked]
    rank = next((i for i, d in enumerate(docs, start=1) if d in wanted), None)
    return {
        "gold_rank": rank,
        "retrieval_recall": len(wanted & set(docs[:k])) / len(wanted),
        "candidate_recall": len(wanted & set(docs)) / len(wanted),
    }


def judge_drafts(
    drafts: Sequence[SampleDraft],
    checker: ClaimChecker,
    judge: Judge | None = None,
    verifier: Verifier | AnswerVerifier | None = None,
) -> list[ClaimRow]:
    """Faithfulness (offline, by the model verifier and by the LLM judge when configured) and abstention of
    each answered sample; returns the claim evidence rows.
    """
    claims: list[ClaimRow] = []
    answered = [(d, d.generation.answer) for d in drafts if d.ok and d.generation is not None]
    contexts = [(d.compression.context_text if d.compression else None) or "" for d, _ in answered]
    # One batch per setting: the checker embeds the spans of every answer in one call.
    items = [(a, c, d.key.question) for (d, a), c in zip(answered, contexts, strict=True)]
    results = checker.check_many(items, cut=[d.generation.answer_cut if d.generation else None for d, _ in answered])
    t0 = time.perf_counter()
    whole: list[AnswerLikelihood | None] = [None] * len(answered)
    model_claims: list[list[ClaimScore | ClaimLikelihood]] = [[] for _ in answered]
    if isinstance(verifier, AnswerVerifier):
        # The generator's likelihoods: every answer of the setting in shared engine batches.
        scored = verifier.score_answers(
            [
                AnswerItem(d.key.question, c, a, [v.claim for v in r.claims], [v.supported for v in r.claims])
                for (d, a), c, r in zip(answered, contexts, results, strict=True)
            ]
        )
        whole = list(scored)
        model_claims = [list[ClaimScore | ClaimLikelihood](s.claims) for s in scored]
    elif verifier is not None:
        # A claim verifier: every claim of the setting in shared batches, against the rule checker's best span
        # and the windows sharing most of its words.
        checked = [(v.claim, c, v.best_span or None) for c, r in zip(contexts, results, strict=True) for v in r.claims]
        scores = iter(verifier.score_claims(checked) if checked else [])
        model_claims = [[next(scores) for _ in r.claims] for r in results]
    seconds = time.perf_counter() - t0
    with_claims = sum(1 for r in results if r.claims)
    method = getattr(verifier, "method", None) if verifier is not None else None
    for i, ((draft, answer), context, result) in enumerate(zip(answered, contexts, results, strict=True)):
        ragas = ragas_columns(judge, draft.key.question, answer, context) if judge is not None else {}
        model = model_claims[i]
        answer_verdict = whole[i]
        if answer_verdict is not None:
            by_answer = None if answer_verdict.supported is None else float(answer_verdict.supported)
        else:
            supported = [m.supported for m in model if m.supported is not None]
            by_answer = sum(supported) / len(supported) if supported else None
        draft.judgment = JudgmentPart(
            faithfulness=result.score,
            faithfulness_status=result.status,
            n_claims=len(result.claims),
            abstained=abstained(answer),
            faithfulness_model=by_answer,
            faithfulness_method=method,
            faithfulness_model_s=(seconds / with_claims if result.claims else 0.0) if verifier is not None else None,
            **ragas,
        )
        for j, v in enumerate(result.claims):
            verdict = judge.entails(v.claim, context) if judge is not None else (None, None)
            by_model = model[j] if model else None
            extra: dict[str, Any] = {}
            if isinstance(by_model, ClaimScore):
                extra = {"model_prob": by_model.probability, "model_supported": by_model.supported}
                extra["model_window"] = by_model.window
            elif by_model is not None:
                feats = by_model.features or {}
                extra = {"model_prob": by_model.probability, "model_supported": by_model.supported}
                extra |= {"lik_mean": feats.get("lp_mean"), "lik_p10": feats.get("lp_p10")}
                extra |= {"lik_min": feats.get("lp_min"), "pmi_mean": feats.get("pmi_mean")}
                extra |= {"pmi_p10": feats.get("pmi_p10"), "pmi_min": feats.get("pmi_min")}
            claims.append(
                ClaimRow(
                    run_id=draft.key.run_id,
                    setting_hash=draft.key.setting_hash,
                    question_id=draft.key.question_id,
                    claim_idx=j,
                    judge_supported=verdict[0],
                    judge_status=verdict[1],
                    **extra,
                    **v.model_dump(),
                )
            )
    return claims


def ragas_columns(judge: Judge, question: str, answer: str, context: str) -> dict[str, Any]:
    """The judge's score and status; a judge outage costs the column, not the sweep."""
    if abstained(answer):
        return {"ragas_faithfulness": None, "ragas_status": "no_statements"}
    try:
        score = judge.score(question, answer, [context])
    except Exception as exc:
        return {"ragas_faithfulness": None, "ragas_status": f"error: {type(exc).__name__}: {exc}"[:500]}
    return {"ragas_faithfulness": score, "ragas_status": "ok" if score is not None else "no_statements"}
