"""Scoring a setting's answered rows: answer metrics, faithfulness with claim evidence, abstention, retrieval."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corpus.models import Hit
from eval.faithfulness import ClaimChecker
from eval.metrics import METRICS, abstained
from eval.rows import ClaimRow, SampleRow


def score_answer(answer: str, context: str, golds: Sequence[str]) -> dict[str, float]:
    return {name: m.fn(answer if m.on == "answer" else context, golds) for name, m in METRICS.items()}


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


def judge_rows(rows: list[SampleRow], checker: ClaimChecker, judge: Any = None) -> list[ClaimRow]:
    """Faithfulness (offline, and by the LLM judge when one is configured) and abstention of each answered
    row; returns the claim evidence rows."""
    claims: list[ClaimRow] = []
    for i, row in enumerate(rows):
        if row.status != "ok" or row.answer is None:
            continue
        result = checker.check(row.answer, row.context_text or "")
        rows[i] = row.model_copy(
            update={
                "faithfulness": result.score,
                "faithfulness_status": result.status,
                "n_claims": len(result.claims),
                "abstained": abstained(row.answer),
                **(ragas_columns(judge, row) if judge is not None else {}),
            }
        )
        claims += [
            ClaimRow(
                run_id=row.run_id,
                setting_hash=row.setting_hash,
                question_id=row.question_id,
                claim_idx=j,
                **v.model_dump(),
            )
            for j, v in enumerate(result.claims)
        ]
    return claims


def ragas_columns(judge: Any, row: SampleRow) -> dict[str, Any]:
    if abstained(row.answer or ""):
        return {"ragas_faithfulness": None, "ragas_status": "no_statements"}
    try:
        score = judge.score(row.question, row.answer or "", [row.context_text or ""])
    except Exception as exc:  # a judge outage costs the column, not the sweep
        return {"ragas_faithfulness": None, "ragas_status": f"error: {type(exc).__name__}: {exc}"[:500]}
    return {"ragas_faithfulness": score, "ragas_status": "ok" if score is not None else "no_statements"}
