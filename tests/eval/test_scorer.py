"""A unit scorer trained on the user's own corpus: pairs labelled by the reference, refusal of judged
questions by content, a short real training that writes a loadable folder and card, resume after a kill,
and the pruned selectors keeping units in the scorer's order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict

from corpus.chunk import SentenceChunker
from corpus.errors import CribsheetError, InputFileError
from corpus.index import IndexOptions, sync_index
from corpus.lease import LEASES
from corpus.models import Question
from corpus.retrieve import LanceRetriever
from corpus.sentences import SentenceVectors, unit_spans
from eval.compress.scorer import SCORERS, UnitScorer, scored_text
from eval.train.card import ranking_auc
from eval.train.fit import TrainConfig, last_checkpoint, train_scorer_model, triplets
from eval.train.pairs import PairRules, ScorerPair, build_pairs, passage_pool, refuse_overlap
from eval.train.train_scorer import ScorerInputs, train_scorer
from tests.conftest import TINY_DOCS, write_jsonl
from tests.fakes import HashEmbedder, count_words
from tests.helpers import load_documents

MORE_DOCS = [
    {
        "id": "Danube",
        "title": "Danube",
        "text": "The Danube is the second-longest river in Europe. It rises in the Black Forest. "
        "It flows through ten countries. The river empties into the Black Sea.",
    },
    {
        "id": "Alps",
        "title": "Alps",
        "text": "The Alps are the highest mountain range in Europe. Mont Blanc is their highest peak. "
        "Glaciers cover parts of the range.",
    },
]
QUESTIONS = [
    {"id": "q1", "question": "How high is K2?", "answers": ["8,611 metres"], "gold_doc_ids": ["K2"]},
    {"id": "q2", "question": "Where does the Danube rise?", "answers": ["in the Black Forest"]},
    {"id": "q3", "question": "Which sea does the Nile flow into?", "answers": ["the Mediterranean Sea"]},
    {"id": "q4", "question": "What is the highest peak of the Alps?", "answers": ["Mont Blanc"]},
    {"id": "q5", "question": "Who painted the Mona Lisa?", "answers": ["Leonardo da Vinci"]},
    {"id": "q6", "question": "When did the Beatles form in Liverpool?", "answers": ["1960"]},
    {"id": "q7", "question": "Where does the Danube end?", "answers": ["the Black Sea"]},
    {"id": "q8", "question": "How large is Asia?", "answers": ["44 million square kilometres"]},
]


@pytest.fixture
def index(tmp_path: Path) -> Path:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", TINY_DOCS + MORE_DOCS)
    path = tmp_path / "idx.lancedb"
    sync_index(load_documents(corpus), SentenceChunker(), HashEmbedder(), path, IndexOptions(sentence_vectors=True))
    return path


def _questions() -> list[Question]:
    return [Question.model_validate(q) for q in QUESTIONS]


def test_pairs_are_labelled_by_the_references_content_words(index: Path) -> None:
    retriever = LanceRetriever(index, HashEmbedder())
    stored = SentenceVectors(index)
    pool = passage_pool(retriever.table)
    rules = PairRules(retrieve_n=2, hard_negatives=3, easy_negatives=2, validation_share=0.3)
    made = build_pairs(_questions(), retriever, stored, pool, rules)
    by_question: dict[str, list[ScorerPair]] = {}
    for p in made.pairs:
        by_question.setdefault(p.question_id, []).append(p)
    assert made.questions == 8 and made.without_positive == len(QUESTIONS) - len(by_question)
    assert "q5" not in by_question  # the corpus does not hold the answer: no positive, no pair
    k2 = by_question["q1"]
    assert [p.unit for p in k2 if p.kind == "positive"] == [
        "K2 is the second-highest mountain on Earth, at 8,611 metres above sea level."
    ]
    for qid, pairs in by_question.items():
        question = next(q for q in _questions() if q.id == qid)
        retrieved = {h.text for h in retriever.retrieve(question.question, 2)}
        for p in pairs:
            assert p.label == (1.0 if p.kind == "positive" else 0.0)
            assert (p.recall >= rules.positive_recall) if p.label else (p.recall <= rules.negative_recall)
            from_retrieved = any(p.unit in text for text in retrieved)
            assert from_retrieved if p.kind in ("positive", "hard") else not from_retrieved
        assert len({p.split for p in pairs}) == 1  # held out by question, never split across
    assert {p.kind for p in made.pairs} == {"positive", "hard", "easy"}
    assert {p.split for p in made.pairs} == {"train", "validation"}
    again = build_pairs(_questions(), retriever, stored, pool, rules)
    assert again.digest == made.digest  # seeded draws


def test_questions_a_sweep_is_judged_on_are_refused_by_content_not_by_name(tmp_path: Path) -> None:
    train = _questions()
    judged = [Question(id="other-id", question="how HIGH is k2 ?", answers=["x"])]  # same question, other text
    with pytest.raises(InputFileError, match="1 of its 8 questions are also questions of"):
        refuse_overlap(train, tmp_path / "train.jsonl", judged, tmp_path / "held-out.jsonl")
    refuse_overlap(
        train, tmp_path / "train.jsonl", [Question(id="q1", question="How tall is K2?", answers=["x"])], tmp_path
    )
    # Another question about a document a judged question asks about: its units would be learned, then scored.
    on_k2 = [Question(id="h", question="What range is K2 in?", answers=["Karakoram"], gold_doc_ids=["K2"])]
    with pytest.raises(InputFileError, match="ask about documents that questions of .* ask about .*'K2'"):
        refuse_overlap(train, tmp_path / "train.jsonl", on_k2, tmp_path / "held-out.jsonl")


def test_validation_is_held_out_by_document_so_no_document_is_in_both_splits() -> None:
    from eval.train.pairs import split_of

    docs = [f"doc-{i}" for i in range(40)]
    # Three questions per document (as `cribsheet questions --structure-per-doc` writes), some about two.
    questions = [
        Question(id=f"{d}-{k}", question=f"question {k} about {d}", answers=["x"],
                 gold_doc_ids=[d] if k < 2 else [d, docs[(i + 1) % len(docs)]])
        for i, d in enumerate(docs) for k in range(3)
    ]  # fmt: skip
    splits = {q.id: split_of(q, 0.25) for q in questions}
    train_docs = {d for q in questions if splits[q.id] == "train" for d in q.gold_doc_ids}
    validation_docs = {d for q in questions if splits[q.id] == "validation" for d in q.gold_doc_ids}
    assert (
        train_docs
        and validation_docs
        and not train_docs
        & {d for q in questions if splits[q.id] == "validation" and len(q.gold_doc_ids) == 1 for d in q.gold_doc_ids}
    )
    # Every question about a held-out document is in validation: training never saw that document's units.
    held = {d for d in docs if all(splits[q.id] == "validation" for q in questions if d in q.gold_doc_ids)}
    assert held and not held & train_docs


def test_the_command_refuses_a_sweep_configs_questions_and_a_not_on_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    train = write_jsonl(tmp_path / "train.jsonl", QUESTIONS)
    held = write_jsonl(
        tmp_path / "held.jsonl", [{**QUESTIONS[3], "id": "h1", "question": "What is the HIGHEST peak of the Alps"}]
    )
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"index_path: {tmp_path / 'idx'}\nquestions_path: {held}\nstore_path: {tmp_path / 'r.duckdb'}\n")
    runner = CliRunner()
    for args in (["--config", str(sweep)], ["--index", str(tmp_path / "idx"), "--not-on", str(held)]):
        result = runner.invoke(app, ["train-scorer", "--questions", str(train), "--out", str(tmp_path / "m"), *args])
        assert result.exit_code == 2 and "also questions of" in result.output, result.output
    assert not (tmp_path / "m").exists()


def _pairs(n_questions: int = 6) -> list[ScorerPair]:
    """A handful of pairs: each question's positive holds its answer, its negatives do not."""
    facts = [
        ("How high is K2?", "K2 rises 8,611 metres above sea level."),
        ("Where does the Danube rise?", "The Danube rises in the Black Forest."),
        ("What is the capital of France?", "Paris is the capital of France."),
        ("Where did the Beatles form?", "The Beatles formed in Liverpool."),
        ("Which sea does the Nile reach?", "The Nile flows into the Mediterranean Sea."),
        ("What is Mont Blanc?", "Mont Blanc is the highest peak of the Alps."),
    ][:n_questions]
    pairs = []

    def pair(i: int, unit: str, label: float, split: str) -> ScorerPair:
        kind = "positive" if label else "hard"
        return ScorerPair(
            question_id=f"q{i}", question=facts[i][0], unit=unit, scored=unit, label=label, kind=kind,
            recall=label, split=split,
        )  # fmt: skip

    for i, (_, answer) in enumerate(facts):
        split = "validation" if i >= n_questions - 2 else "train"
        pairs.append(pair(i, answer, 1.0, split))
        pairs += [pair(i, other, 0.0, split) for j, (_, other) in enumerate(facts) if j != i and j % 2 == i % 2]
    return pairs


TINY_TRAINING = TrainConfig(batch_size=4, epochs=1.0, save_steps=100, logging_steps=1, max_length=48)
"""No checkpoint (each writes the model and its optimizer state): the resume test sets its own steps."""
TINY_BI_ENCODER = TINY_TRAINING.model_copy(update={"kind": "bi-encoder", "batch_size": 1})
"""One triplet a step: four steps over the four training questions of `_pairs()`."""


def test_a_short_training_writes_a_folder_the_reranker_and_the_pruned_selectors_load(
    index: Path, tmp_path: Path
) -> None:
    from corpus.models import Hit
    from eval.compress import COMPRESSORS, CompressorDeps
    from eval.compress.pruned import PrunedConfig
    from eval.rerank import RerankerDeps, build_reranker

    questions = write_jsonl(tmp_path / "train.jsonl", QUESTIONS)
    held = write_jsonl(tmp_path / "held.jsonl", [{"id": "h1", "question": "Who painted it?", "answers": ["Leo"]}])
    out = tmp_path / "scorer"
    inputs = ScorerInputs(index, questions, out, not_on=(held,))
    rules = PairRules(retrieve_n=3, hard_negatives=2, easy_negatives=1, validation_share=0.3)
    ticks: list[tuple[str, int, int]] = []
    leased: list[bool] = []  # whether a reader lease keeps the snapshot from `cribsheet reclaim` at each tick

    def tick(*t: Any) -> None:
        ticks.append(t)
        leased.append(any((index / LEASES).glob("*.json")))

    card = train_scorer(inputs, rules, TINY_TRAINING, tick, embedder=HashEmbedder())
    assert any(leased) and not any((index / LEASES).glob("*.json"))  # held while the index is read, then gone
    # What reproduces the weights: the libraries, the precision it resolved, the files it checked, by digest.
    assert {"torch", "transformers"} <= set(card.libraries) and card.training["precision"] in ("bfloat16", "float32")
    assert card.refused_overlap_sha256 == {str(held): hashlib.sha256(held.read_bytes()).hexdigest()}
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".scorer")) == [".scorer.training"]
    assert card.steps >= 2 and ("train scorer", card.steps, card.steps) in ticks
    assert card.train_pairs + card.validation_pairs == card.positives + card.hard_negatives + card.easy_negatives
    assert card.validation_pairs and card.validation.auc is not None and card.bi_encoder.auc is not None
    assert len(card.loss_curve) == card.steps and card.pairs_sha256 and card.train_seconds > 0
    assert card.kind == "cross-encoder" and card.training["learning_rate"] == 5e-5  # the rate it trained at
    stored = json.loads((out / "card.json").read_text())
    assert stored["weights"] == card.weights and "# Unit scorer" in (out / "card.md").read_text()
    assert not (tmp_path / ".scorer.training" / "checkpoints").exists() or not any(
        (tmp_path / ".scorer.training").rglob("checkpoint-*")
    )  # the checkpoints go once the model is in place; the labelled pairs stay for a later run
    # The folder is what cross-encoder:PATH loads, as reranker and as the pruned selectors' scorer.
    reranker = build_reranker(f"cross-encoder:{out}", RerankerDeps())
    hits = [Hit(chunk_id=d["id"], doc_id=d["id"], title=d["title"], text=d["text"], score=0.0) for d in TINY_DOCS]
    assert len(reranker.rerank("How high is K2?", hits)) == len(hits)
    config = PrunedConfig(scorer=f"cross-encoder:{out}")
    assert config.scorer_weights == card.weights  # the weights enter the setting's config, and so its hash
    deps = CompressorDeps(count_tokens=count_words, embedder=HashEmbedder(), index_path=index)
    pruned = COMPRESSORS.build(COMPRESSORS.spec("pruned", config.model_dump()), deps)
    result = pruned.compress([d["text"] for d in TINY_DOCS], "How high is K2?", 2.0)
    assert result.tokens_out < result.tokens_in and result.cold_seconds and result.cold_seconds > 0
    # Trained again at the same path: the stored setting's weights no longer match and it is refused.
    with pytest.raises(ValueError, match="weights are"):
        PrunedConfig(scorer=f"cross-encoder:{out}", scorer_weights="0" * 16)


@pytest.mark.parametrize(
    "config",
    [TINY_TRAINING, pytest.param(TINY_BI_ENCODER, marks=pytest.mark.slow)],  # the same checkpoints and resume
    ids=["cross-encoder", "bi-encoder"],
)
def test_a_killed_training_resumes_from_its_last_complete_checkpoint(tmp_path: Path, config: TrainConfig) -> None:
    pairs, config = _pairs(), config.model_copy(update={"save_steps": 2})
    whole = train_scorer_model(pairs, tmp_path / "whole", tmp_path / "work-a", config)

    class Killed(Exception):
        pass

    def kill_at_step_3(stage: str, done: int, total: int) -> None:
        if done == 3:
            raise Killed  # what kill -9 leaves: the checkpoints written so far (here, step 2's)

    with pytest.raises(Killed):
        train_scorer_model(pairs, tmp_path / "resumed", tmp_path / "work-b", config, kill_at_step_3)
    (run,) = (tmp_path / "work-b").iterdir()
    cut = run / "checkpoints" / "checkpoint-3"
    cut.mkdir()  # a checkpoint cut off mid-write (no trainer state): never resumed from
    (cut / "model.safetensors").write_bytes(b"partial")
    assert last_checkpoint(run / "checkpoints") == run / "checkpoints" / "checkpoint-2"
    resumed = train_scorer_model(pairs, tmp_path / "resumed", tmp_path / "work-b", config)
    assert resumed.resumed_from == 2 and resumed.steps == whole.steps
    assert [s for s, _ in resumed.loss_curve] == [s for s, _ in whole.loss_curve]  # the curve before the kill kept
    assert [x for _, x in resumed.loss_curve] == pytest.approx([x for _, x in whole.loss_curve], rel=1e-4)  # seeded


def test_a_bi_encoder_training_writes_a_folder_the_scorer_and_reranker_load_and_a_retraining_is_reloaded(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from sentence_transformers import SentenceTransformer

    from corpus.models import Hit
    from eval.compress.pruned import PrunedConfig
    from eval.compress.scorer import build_scorer
    from eval.rerank import RerankerDeps, build_reranker

    pairs, out = _pairs(), tmp_path / "bi"
    config = TINY_BI_ENCODER
    trained = train_scorer_model(pairs, out, tmp_path / "work", config)
    assert trained.steps == 4 and (out / "modules.json").is_file()
    assert "widget" not in capfd.readouterr().err  # no stray progress bar of the trainer's Hub card
    units = ["K2 rises 8,611 metres above sea level.", "Paris is the capital of France."]
    model = SentenceTransformer(str(out), device="cpu")
    assert model.max_seq_length == TINY_BI_ENCODER.max_length  # what training read, saved with the model
    q, *u = model.encode(["How high is K2?", *units], normalize_embeddings=True)
    scores = build_scorer(f"bi-encoder:{out}").score("How high is K2?", units)
    assert scores == pytest.approx([float(u[0] @ q), float(u[1] @ q)], abs=1e-5)  # the cosine, as stored vectors
    weights = PrunedConfig(scorer=f"bi-encoder:{out}").scorer_weights
    assert weights is not None
    hits = [Hit(chunk_id=d["id"], doc_id=d["id"], title=d["title"], text=d["text"], score=0.0) for d in TINY_DOCS]
    ranked = build_reranker(f"bi-encoder:{out}", RerankerDeps()).rerank("How high is K2?", hits)
    assert sorted(h.chunk_id for h in ranked) == sorted(h.chunk_id for h in hits)
    assert [h.score for h in ranked] == sorted((h.score for h in ranked), reverse=True)
    # Trained again at the same path with another seed: a new load (the process cache is keyed by the weights)
    # and another fingerprint in the setting.
    train_scorer_model(pairs, out, tmp_path / "work", config.model_copy(update={"seed": 7}))
    assert PrunedConfig(scorer=f"bi-encoder:{out}").scorer_weights != weights
    assert build_scorer(f"bi-encoder:{out}").score("How high is K2?", units) != pytest.approx(scores, abs=1e-6)


def test_bi_encoder_triplets_pair_each_positive_with_a_hard_negative_whatever_the_pairs_order() -> None:
    pairs = [p for p in _pairs() if p.split == "train"]
    easy = pairs[1].model_copy(update={"kind": "easy", "unit": "An easy one.", "scored": "An easy one."})
    rows = triplets([*pairs, easy], seed=3)
    assert rows == triplets(list(reversed([*pairs, easy])), seed=3)
    assert len(rows["anchor"]) == sum(p.label == 1.0 for p in pairs) == 4
    positives = {p.question: p.scored for p in pairs if p.label == 1.0}
    hard = {(p.question, p.scored) for p in pairs if p.kind == "hard"}
    for anchor, positive, negative in zip(rows["anchor"], rows["positive"], rows["negative"], strict=True):
        assert positives[anchor] == positive and (anchor, negative) in hard  # never the easy one beside hard ones


def test_ranking_auc_counts_ties_as_half() -> None:
    assert ranking_auc([1, 0, 0], [0.9, 0.1, 0.2]) == 1.0
    assert ranking_auc([1, 0], [0.5, 0.5]) == 0.5
    assert ranking_auc([1, 1, 0, 0], [0.8, 0.3, 0.5, 0.1]) == 0.75
    assert ranking_auc([1, 1], [0.1, 0.2]) is None


class _ByWordConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    word: str = "river"


class _ByWord:
    """A fake scorer: 1 for a unit that holds `word`, else 0, less a hair per character (shorter first among
    equals); each call costs SCORING_S on the fake clock."""

    name = "by-word"

    def __init__(self, word: str) -> None:
        self.word = word
        self.seen: list[list[str]] = []

    def score(self, question: str, units: Sequence[str]) -> np.ndarray:
        self.seen.append(list(units))
        clock.now += SCORING_S
        return np.array([float(self.word in u.lower()) - len(u) / 1e4 for u in units], dtype=np.float32)


@SCORERS.register("by-word", _ByWordConfig, arg="word")
def _by_word(config: _ByWordConfig, deps: None) -> UnitScorer:
    return _ByWord(config.word)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


clock = _Clock()
SCORING_S = 0.5
READ_S = 1.0


class _Store:
    """The index's units (plain sentences) and no vectors: a scorer needs none."""

    def lookup_with_cost(self, sentences: list[str]) -> tuple[dict, dict]:
        raise AssertionError("a scored selector reads no vector")

    def units(self, passages: list[str]) -> list:
        clock.now += READ_S
        return [unit_spans(p) for p in passages]


def test_the_pruned_selectors_keep_units_in_the_scorers_order_and_bill_its_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import eval.compress.extractive as extractive
    from eval.compress.pruned import PrunedCompressor, PrunedConfig
    from eval.compress.pruned_auto import AutoPrunedCompressor, AutoPrunedConfig

    monkeypatch.setattr(extractive, "time", clock)
    passages = [
        "Paris is the capital of France. The Seine is the river of Paris. It has many bridges.",
        "The Alps are high. The Rhine is a river that rises in the Alps.",
    ]
    question = "What is the capital of France?"  # the question's words point at Paris; the scorer at rivers
    scorer = _ByWord("river")
    config = PrunedConfig(word_overlap=0.0, rank_prior=0.0)
    pruned = PrunedCompressor(count_words, HashEmbedder(), _Store(), True, config, scorer)  # type: ignore[arg-type]
    before = clock.now
    result = pruned.compress(passages, question, 1.8)  # a budget of 17 words: the two river units
    assert result.texts == ["The Seine is the river of Paris.", "The Rhine is a river that rises in the Alps."]
    assert scorer.seen[-1] == [u for p in passages for u in (p[a:b] for a, b, *_ in unit_spans(p))]
    assert result.seconds == pytest.approx(clock.now - before) == pytest.approx(READ_S + SCORING_S)
    assert result.cold_seconds == pytest.approx(SCORING_S)  # the scoring, batched once per question, is billed
    auto = AutoPrunedCompressor(
        count_words, HashEmbedder(), _Store(), AutoPrunedConfig(whole_passages=0, keep_question_words=False), scorer
    )  # type: ignore[arg-type]
    kept = auto.compress(passages, question, 8.0).texts
    assert "river" in kept[0] and "capital" not in " ".join(kept)
    with pytest.raises(CribsheetError, match="agnostic twin takes none"):
        PrunedCompressor(count_words, HashEmbedder(), _Store(), False, config, scorer)  # type: ignore[arg-type]


def test_a_scorer_reads_each_unit_under_the_nearest_heading_of_its_passage() -> None:
    spans = [
        (0, "fsPromises.chmod(path, mode)", True, "signature"),
        (0, "Changes the permissions of a file.", True, "text"),
        (1, "Returns a promise.", True, "text"),
    ]
    assert scored_text(spans, 1) == "fsPromises.chmod(path, mode)\nChanges the permissions of a file."
    assert scored_text(spans, 0) == "fsPromises.chmod(path, mode)"
    assert scored_text(spans, 2) == "Returns a promise."  # never across passages


def test_a_scorer_is_in_the_setting_hash_and_none_leaves_every_earlier_hash(tmp_path: Path) -> None:
    from eval.settings import CompressionSpec, CompressorConfig, GridConfig, SweepConfig

    assert "scorer" not in CompressorConfig().model_dump()  # the dump (and so every hash) is as before scorers
    grid = GridConfig(compressions=[CompressionSpec(compressor="pruned", target_ratio=4.0)])
    base = SweepConfig(index_path=tmp_path, questions_path=tmp_path, store_path=tmp_path / "r", grid=grid)
    scored = base.model_copy(update={"compressor": CompressorConfig(scorer="by-word:river")})
    other = base.model_copy(update={"compressor": CompressorConfig(scorer="by-word:sea")})
    setting = grid.expand()[0]
    hashes = {base.setting_hash(setting), scored.setting_hash(setting), other.setting_hash(setting)}
    assert len(hashes) == 3 and base.config_hash() != scored.config_hash()
    with pytest.raises(ValueError, match="unknown unit scorer"):
        CompressorConfig(scorer="no-such-scorer:x")


def test_training_batches_group_pairs_of_similar_length_in_a_seeded_order() -> None:
    from eval.train.fit import LengthBuckets

    texts = [("q" * (i % 7), "t" * ((i * 37) % 101)) for i in range(250)]
    data = {"query": [q for q, _ in texts], "text": [t for _, t in texts]}
    sampler = LengthBuckets(data, batch_size=8, drop_last=False, seed=3)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 32 and sorted(i for b in batches for i in b) == list(range(250))
    spread = max(max(sampler.lengths[i] for i in b) - min(sampler.lengths[i] for i in b) for b in batches)
    assert spread < 20  # a random batch of 8 would span most of the 0-106 range
    assert list(LengthBuckets(data, 8, False, seed=3)) == batches  # the same seed and epoch: the same order
    sampler.set_epoch(1)
    assert list(sampler) != batches


def test_a_scorer_retrained_at_the_same_path_is_another_setting_and_a_stale_fingerprint_is_refused(
    tmp_path: Path,
) -> None:
    """Retrained in place (the folder's weights rewritten): the same config text gives another setting hash,
    and a setting stored with the old fingerprint is refused when rebuilt, naming both fingerprints."""
    from eval.compress.pruned import PrunedConfig
    from eval.settings import CompressionSpec, CompressorConfig, GridConfig, SweepConfig

    folder = tmp_path / "scorer"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"trained once")
    (folder / "config.json").write_text("{}")
    grid = GridConfig(compressions=[CompressionSpec(compressor="pruned", target_ratio=4.0)])
    setting = grid.expand()[0]

    def built() -> tuple[SweepConfig, str]:
        config = SweepConfig(
            index_path=tmp_path, questions_path=tmp_path, store_path=tmp_path / "r", grid=grid,
            compressor=CompressorConfig(scorer=f"cross-encoder:{folder}"),
        )  # fmt: skip
        return config, config.setting_hash(setting)

    first, first_hash = built()
    old = PrunedConfig.model_validate({"scorer": f"cross-encoder:{folder}"}).scorer_weights
    (folder / "model.safetensors").write_bytes(b"trained again, into the same folder")
    _, second_hash = built()
    assert old is not None and first_hash != second_hash
    with pytest.raises(ValueError, match=f"its weights are [0-9a-f]{{16}} now, not {old}"):
        PrunedConfig.model_validate({"scorer": f"cross-encoder:{folder}", "scorer_weights": old})


def test_a_scorer_is_swapped_in_whole_and_a_swap_killed_half_way_is_put_back(tmp_path: Path) -> None:
    """The new folder (model and card) replaces the old by two renames; killed between them, the old scorer
    sits aside and the next run puts it back before anything else."""
    from eval.train.train_scorer import restore_interrupted_swap, swap_into_place

    out, staged = tmp_path / "scorer", tmp_path / ".scorer.new"
    for folder, text in ((out, "old"), (staged, "new")):
        folder.mkdir()
        (folder / "card.json").write_text(text)
    swap_into_place(staged, out)
    assert (out / "card.json").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["scorer"]
    out.rename(tmp_path / ".scorer.previous")  # killed after the first rename
    restore_interrupted_swap(out)
    assert (out / "card.json").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["scorer"]
