"""Per-corpus tuning of pruned-auto: the hardest setting whose loss is within the budget with confidence."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from corpus.chunk import SentenceChunker
from corpus.errors import CribsheetError
from corpus.index import IndexOptions, sync_index
from corpus.lease import LEASES
from eval.compress import CompressionResult
from eval.compress.pruned_auto import AutoPrunedConfig
from eval.compress.tuning import (
    SHARES,
    WHOLE,
    TuneContext,
    TunedPoint,
    choose,
    loss_upper_bound,
    simultaneous_z,
    tune_pruned_auto,
)
from eval.run.tune_pruning import TuneInputs, tune_pruning
from tests.fakes import HashEmbedder, count_words
from tests.helpers import load_documents

LOSES = {0.95: 0, 0.8: 1, 0.5: 20}
"""Questions (of 40) whose answer each share's fake selection drops."""
RATIOS = {0.95: 1.5, 0.8: 3.0, 0.5: 6.0}


class _Fake:
    """A selection whose loss and ratio depend only on its relevance share: question i loses its answer passage
    when i is below the share's count in LOSES."""

    def __init__(self, config: AutoPrunedConfig) -> None:
        self.share = config.relevance_share

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        lost = int(question.split()[-1]) < LOSES[self.share]
        kept = [1] if lost else [0]
        return CompressionResult(
            texts=[passages[kept[0]]], tokens_in=60, tokens_out=round(60 / RATIOS[self.share]), seconds=0.0, kept=kept
        )


CONTEXTS = [
    TuneContext(f"question {i}", ["Danube"], ["Rivers", "Cities"], ["The Danube flows east.", "Vienna has a ring."])
    for i in range(40)
]


def _tune(shares: Sequence[float], max_loss: float) -> tuple[float, int] | None:
    result = tune_pruned_auto(_Fake, CONTEXTS, shares=shares, whole=(0,), max_loss=max_loss)  # type: ignore[arg-type]
    assert result.baseline_recall == 1.0 and len(result.points) == len(shares)
    return (result.chosen.relevance_share, result.chosen.whole_passages) if result.chosen else None


def test_the_hardest_setting_within_the_budget_with_confidence_is_chosen() -> None:
    # 0.8 loses 1 of 40 answers: a mean loss of 2.5 points, within 5, but its upper bound is 6.6: not taken.
    assert _tune((0.5, 0.8, 0.95), 0.05) == (0.95, 0)
    # With a 10-point budget its bound fits, and it compresses twice as hard as 0.95.
    assert _tune((0.5, 0.8, 0.95), 0.10) == (0.8, 0)
    # No setting within the budget: none is chosen (the command exits 1).
    assert _tune((0.5, 0.8), 0.05) is None


def test_the_loss_bound_is_the_one_sided_95_percent_bound_of_the_paired_differences() -> None:
    base, kept = [1.0] * 40, [0.0] + [1.0] * 39
    assert loss_upper_bound(base, kept) == pytest.approx(0.025 + 1.645 * 0.158114 / 40**0.5, abs=1e-5)
    assert loss_upper_bound([1.0, 0.5], [1.0, 0.5]) == 0.0
    with pytest.raises(ValueError, match="no tune questions"):
        tune_pruned_auto(_Fake, [])  # type: ignore[arg-type]


def test_the_bound_holds_for_the_whole_grid_so_the_best_of_many_is_not_taken_on_luck() -> None:
    # Bonferroni over the settings tried: one setting alone is the plain one-sided 95 % bound, 21 need 2.82.
    assert simultaneous_z(1) == pytest.approx(1.645, abs=1e-3)
    assert simultaneous_z(21) == pytest.approx(2.82, abs=1e-2)
    # 0.8 loses 1 of 40 answers (2.5 points, 2.5 points of standard error): alone its bound is 6.6 points,
    # within a 7-point budget; as one of three settings tried it is 7.8, and the budget no longer holds it.
    result = tune_pruned_auto(_Fake, CONTEXTS, shares=(0.5, 0.8, 0.95), whole=(0,), max_loss=0.07)  # type: ignore[arg-type]
    point = next(p for p in result.points if p.relevance_share == 0.8)
    assert result.z == pytest.approx(simultaneous_z(3))
    assert point.loss_bound == pytest.approx(0.025 + simultaneous_z(3) * 0.158114 / 40**0.5, abs=1e-5)
    assert loss_upper_bound([1.0] * 40, [0.0] + [1.0] * 39) < 0.07 < point.loss_bound
    assert result.chosen is not None and result.chosen.relevance_share == 0.95


def _point(ratio: float, prompt_ratio: float | None) -> TunedPoint:
    return TunedPoint(0.8, 0, recall=0.9, loss=0.01, loss_bound=0.02, ratio=ratio, prompt_ratio=prompt_ratio)


def test_the_setting_with_the_fewest_prompt_tokens_wins_over_the_hardest_context_ratio() -> None:
    # Fragments of many passages compress the context harder but pay every passage's title in the prompt.
    fragments, whole = _point(4.0, 2.9), _point(3.5, 3.3)
    assert choose([fragments, whole], 0.05) is whole
    # Without a prompt count (no tokenizer), the context ratio decides.
    assert choose([_point(4.0, None), _point(3.5, None)], 0.05) == _point(4.0, None)
    assert choose([replace(whole, loss_bound=0.06)], 0.05) is None


def _prompt_words(context: str, question: str) -> int:
    return count_words(context) + count_words(question)


def _questions(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_tuning_on_an_index_tries_the_whole_grid_on_answerable_questions(
    tmp_path: Path, tiny_corpus: Path, tiny_questions: Path
) -> None:
    index = tmp_path / "idx.lancedb"
    sync_index(
        load_documents(tiny_corpus), SentenceChunker(), HashEmbedder(), index, IndexOptions(sentence_vectors=True)
    )
    ticks: list[tuple[str, int, int]] = []
    inputs = TuneInputs(index, tiny_questions, embedder="hash", min_questions=3)
    leased: list[bool] = []  # whether a reader lease keeps the snapshot from `cribsheet reclaim` at each tick

    def tick(*t: Any) -> None:
        ticks.append(t)
        leased.append(any((index / LEASES).glob("*.json")))

    result = tune_pruning(inputs, progress=tick, embedder=HashEmbedder(), count=count_words, prompt=_prompt_words)
    assert leased and all(leased) and not any((index / LEASES).glob("*.json"))  # held while it reads, then gone
    assert result.questions == 3  # q4 is unanswerable: it has no answer to keep
    assert len(result.points) == len(SHARES) * len(WHOLE) and ticks[-1] == ("pruned-auto settings", 21, 21)
    assert result.chosen is not None and result.chosen.loss_bound <= 0.05
    ok = [p for p in result.points if p.loss_bound <= 0.05]
    assert result.chosen.prompt_ratio == max(p.prompt_ratio or 0.0 for p in ok)
    # Titles and question are in every prompt: the prompt shrinks less than the context does.
    assert result.prompt_tokens and all(p.prompt_ratio and p.prompt_ratio < p.ratio for p in result.points)
    kept_whole = {p.whole_passages: p.ratio for p in result.points if p.relevance_share == 0.6}
    assert kept_whole[0] >= kept_whole[2]  # passages kept whole cost ratio


def test_tuning_refuses_questions_without_answers_and_an_index_without_sentence_vectors(
    tmp_path: Path, tiny_corpus: Path
) -> None:
    index = tmp_path / "idx.lancedb"
    sync_index(
        load_documents(tiny_corpus), SentenceChunker(), HashEmbedder(), index, IndexOptions(sentence_vectors=True)
    )
    none = _questions(tmp_path / "q.jsonl", [{"id": "a", "question": "Why?", "answers": ["x"], "answerable": False}])
    with pytest.raises(CribsheetError, match=r"q.jsonl: 0 answerable questions with reference answers"):
        tune_pruning(TuneInputs(index, none, min_questions=1), embedder=HashEmbedder(), count=count_words)
    few = _questions(tmp_path / "few.jsonl", [{"id": f"q{i}", "question": "Why?", "answers": ["x"]} for i in range(29)])
    with pytest.raises(CribsheetError, match=r"few.jsonl: 29 answerable .* needs at least 30"):
        tune_pruning(TuneInputs(index, few), embedder=HashEmbedder(), count=count_words)
    bare = tmp_path / "bare.lancedb"
    sync_index(
        load_documents(tiny_corpus), SentenceChunker(), HashEmbedder(), bare, IndexOptions(sentence_vectors=False)
    )
    with pytest.raises(CribsheetError, match="--sentence-vectors"):
        tune_pruning(TuneInputs(bare, few, min_questions=1), embedder=HashEmbedder(), count=count_words)
    with pytest.raises(CribsheetError, match="nowhere.lancedb: no index here"):
        tune_pruning(TuneInputs(tmp_path / "nowhere.lancedb", few, min_questions=1), embedder=HashEmbedder())


def test_tuning_reads_one_snapshot_the_one_pinned_when_a_sync_commits_after_it(
    tmp_path: Path, tiny_corpus: Path, tiny_questions: Path
) -> None:
    """Chunks and unit vectors come from the same snapshot: the pinned one (a sweep's `index_version`), not
    whatever a later sync committed; unpinned, the latest."""
    from corpus.retrieve import LanceRetriever

    index = tmp_path / "idx.lancedb"
    docs = load_documents(tiny_corpus)
    sync_index(docs, SentenceChunker(), HashEmbedder(), index, IndexOptions(sentence_vectors=True))
    pinned = LanceRetriever(index, HashEmbedder()).version

    def tune(version: int | None) -> float:
        inputs = TuneInputs(index, tiny_questions, embedder="hash", min_questions=3, index_version=version)
        return tune_pruning(inputs, embedder=HashEmbedder(), count=count_words, prompt=_prompt_words).baseline_recall

    before = tune(None)
    gone = [d.model_copy(update={"text": "Nothing about mountains, continents or bands here."}) for d in docs]
    sync_index(gone, SentenceChunker(), HashEmbedder(), index, IndexOptions(sentence_vectors=True))
    assert tune(None) < before  # the latest build lost the answers
    assert tune(pinned) == before  # the pinned one still has them
