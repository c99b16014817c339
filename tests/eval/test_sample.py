"""Sample rows are built once from typed parts: a misspelled field fails where it is written."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from eval.metrics import METRICS
from eval.run.draft import (
    AnswerScores,
    CachePart,
    CitationPart,
    CompressionPart,
    GenerationPart,
    JudgmentPart,
    RetrievalPart,
    SampleDraft,
    SampleKey,
)
from eval.store.lifecycle import LATENCY_COLUMNS
from eval.store.rows import SampleRow

PARTS = (
    SampleKey,
    RetrievalPart,
    CompressionPart,
    GenerationPart,
    AnswerScores,
    JudgmentPart,
    CitationPart,
    CachePart,
)


def _key() -> SampleKey:
    return SampleKey(
        run_id="r",
        setting_hash="h",
        setting_name="none-k3",
        setting_json="{}",
        question_id="q1",
        question="?",
        answerable=True,
        gold_answers='["a"]',
        top_k=3,
        reranker="dense",
        compressor="none",
        target_ratio=1.0,
        retrieval="hybrid",
        layout="ranked",
    )


def test_misspelled_fields_fail_loudly() -> None:
    with pytest.raises(ValidationError, match="compres_seconds"):
        CompressionPart(compres_seconds=1.0)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        SampleRow.model_validate(_key().model_dump() | {"status": "ok", "ttft": 0.1})
    draft = SampleDraft(key=_key(), retrieval=RetrievalPart())
    with pytest.raises(AttributeError):
        draft.probee = CompressionPart()  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match="frozen"):
        draft.retrieval.gold_rank = 3  # type: ignore[misc]


def test_parts_cover_exactly_the_sample_columns() -> None:
    fields = [f for part in PARTS for f in part.model_fields]
    assert len(fields) == len(set(fields)), "two parts define the same column"
    # status and error follow the parts; reused_from_run is set only when the store copies a stored row; the
    # latency phase's summary columns are written by the store from the slots.
    store_written = {"status", "error", "reused_from_run"} | set(LATENCY_COLUMNS)
    assert set(fields) | store_written == set(SampleRow.model_fields)
    assert set(AnswerScores.model_fields) == set(METRICS)


def test_row_status_follows_the_parts() -> None:
    ok = SampleDraft(key=_key(), retrieval=RetrievalPart(gold_rank=1))
    ok.generation = GenerationPart(answer="a", prompt_tokens=10, cached_tokens=5)
    row = ok.row()
    assert (row.status, row.error, row.gold_rank, row.answer) == ("ok", None, 1, "a")
    failed = SampleDraft(key=_key(), retrieval=RetrievalPart())
    failed.fail("compress", ValueError("bad"))
    failed.fail("generate", "later failures do not overwrite the first")
    assert (failed.row().status, failed.row().error) == ("failed", "compress: bad")
    with pytest.raises(RuntimeError, match="never generated"):
        SampleDraft(key=_key(), retrieval=RetrievalPart()).row()
