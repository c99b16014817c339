"""Training pairs for a unit scorer, labelled from the reference answers of a question file on one index.

For each question, the project's retriever (hybrid by default) fetches the candidates a sweep would see; each
candidate's units (as the index stored them, `SentenceVectors.units`) are labelled by how much of the
reference's content words they hold (`eval.metrics.context_token_recall`, the gate's context metric on one
unit): a unit holding at least `positive_recall` of them is a positive, one holding at most
`negative_recall` a hard negative (it was retrieved for the question), and a unit of a random passage that was
not retrieved, holding at most `negative_recall`, an easy negative. Units in between are left out: they hold
part of the answer, and neither label would be true. A question whose candidates have no positive unit adds
no pair (it is counted).

The validation split is held out *by question* (sha256 of the normalised question text), so no question is
seen in training and validation both.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from corpus.errors import InputFileError
from corpus.load import read_jsonl
from corpus.models import Hit, Question
from corpus.questions import shared_questions
from corpus.retrieve import RetrievalMode, Retriever
from corpus.sentences import SentenceVectors
from corpus.text import normalize
from corpus.units import Span
from eval.compress.scorer import scored_text
from eval.metrics import context_token_recall

Progress = Callable[[str, int, int], None]
"""(stage, done, total): what a long step reports."""


class PairRules(BaseModel):
    """How training pairs are drawn and labelled."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    retrieve_n: int = Field(default=20, ge=1)
    """Candidates retrieved per question: their units are the positives and the hard negatives."""
    retrieval: RetrievalMode = "hybrid"
    """The retrieval mode that fetches them (the sweep's default)."""
    positive_recall: float = Field(default=0.6, gt=0.0, le=1.0)
    """A unit holding at least this share of the reference's content words is a positive."""
    negative_recall: float = Field(default=0.25, ge=0.0, lt=1.0)
    """A unit holding at most this share is a negative; units in between are left out."""
    positives: int = Field(default=2, ge=1)
    """Positives per question at most (the units holding most of the reference first)."""
    hard_negatives: int = Field(default=14, ge=0)
    """Hard negatives per question at most, drawn from the retrieved candidates' other units."""
    easy_negatives: int = Field(default=2, ge=0)
    """Easy negatives per question, each a unit of a random passage that was not retrieved."""
    validation_share: float = Field(default=0.1, ge=0.0, lt=1.0)
    """Share of the questions held out for validation (by sha256 of the normalised question text)."""
    seed: int = 0
    """Seed of the negatives' draws (each question's draw is seeded by it and the question's id)."""


PairKind = Literal["positive", "hard", "easy"]


class ScorerPair(BaseModel):
    """One labelled (question, unit) pair."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    question_id: str
    question: str
    unit: str
    """The unit's text as the index stored it."""
    scored: str
    """What the scorer reads: the unit after the nearest heading above it in its passage (`scored_text`)."""
    label: float
    """1.0: the unit holds the reference; 0.0: it does not."""
    kind: PairKind
    recall: float
    """Share of the reference's content words the unit holds."""
    split: Literal["train", "validation"]


@dataclass(frozen=True)
class PairSet:
    """The pairs of a question file on an index, and what they came from."""

    pairs: list[ScorerPair]
    questions: int
    """Questions read (answerable, with a reference)."""
    without_positive: int
    """Questions whose candidates held no positive unit (no pair from them)."""

    @property
    def digest(self) -> str:
        """sha256 of the pairs (canonical JSON lines): what a trained scorer's card names as its data."""
        return pairs_digest(self.pairs)


def pairs_digest(pairs: Sequence[ScorerPair]) -> str:
    """sha256 over the pairs' canonical JSON lines, in order."""
    h = hashlib.sha256()
    for pair in pairs:
        h.update(json.dumps(pair.model_dump(mode="json"), sort_keys=True).encode() + b"\n")
    return h.hexdigest()


def question_key(text: str) -> str:
    """A question by content: its normalised text (case, punctuation, articles and spacing folded)."""
    return normalize(text)


def _below(text: str, share: float) -> bool:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) < share * 16**8


def validation_document(doc_id: str, share: float) -> bool:
    """Whether a document is held out for validation: the `share` of sha256 values below it."""
    return _below(f"doc\x1f{doc_id}", share)


def split_of(question: Question, share: float) -> Literal["train", "validation"]:
    """Which split a question falls in, by its gold documents: validation when any of them is a validation
    document, so no training question asks about a document a validation question asks about (its units
    are never learned and then scored); a question without gold documents goes by its normalised text.
    """
    if question.gold_doc_ids:
        held = any(validation_document(d, share) for d in question.gold_doc_ids)
    else:
        held = _below(question_key(question.question), share)
    return "validation" if held else "train"


def read_training_questions(path: Path, limit: int | None = None) -> list[Question]:
    """The questions a scorer can learn from, in a JSONL question file: the answerable ones with reference
    answers (the first `limit` of them). Not `eval.run.sweep.read_questions`, which keeps every question of a
    sweep's file and returns the digest the run's identity checks.
    """
    found = [q for _, q in read_jsonl(path, Question) if q.answerable and q.answers]
    found = found[:limit] if limit else found
    if not found:
        raise InputFileError(path, "no answerable questions with reference answers to label pairs from")
    return found


def refuse_overlap(train: Sequence[Question], train_path: Path, held: Sequence[Question], held_path: Path) -> None:
    """Refuse training questions that are also questions a sweep or gate is scored on, by content (normalised
    question text), whatever the files are called, and those that ask about a document a judged question asks
    about (by gold document id): a scorer must not be scored on what it learned.
    """
    shared = shared_questions(train, held)
    if shared:
        raise InputFileError(
            train_path,
            f"{len(shared)} of its {len(train)} questions are also questions of {held_path} (by normalised "
            f"text, e.g. {shared[0].question!r}): a scorer trained on them would be scored on what it learned; "
            "train on other questions (a tune split, or `cribsheet questions` on documents the held-out "
            "questions do not ask about)",
        )
    judged_docs = {d for q in held for d in q.gold_doc_ids}
    on_judged = [q for q in train if judged_docs & set(q.gold_doc_ids)]
    if on_judged:
        doc = sorted(judged_docs & set(on_judged[0].gold_doc_ids))[0]
        raise InputFileError(
            train_path,
            f"{len(on_judged)} of its {len(train)} questions ask about documents that questions of {held_path} "
            f"ask about (by gold document, e.g. {doc!r} in {on_judged[0].question!r}): a scorer trained on their "
            "units would be scored on what it learned; train on questions about other documents",
        )


def unit_spans_of(texts: Sequence[str], stored: SentenceVectors) -> list[Span]:
    """The units of passages `texts` as spans (passage, text, ends its block, kind), in order."""
    return [
        (pi, text[u[0] : u[1]], u[2], u[3])
        for pi, (text, units) in enumerate(zip(texts, stored.units(texts), strict=True))
        for u in units
        if text[u[0] : u[1]].strip()
    ]


def label_question(
    question: Question,
    hits: Sequence[Hit],
    stored: SentenceVectors,
    pool: Sequence[str],
    rules: PairRules,
) -> list[ScorerPair]:
    """The pairs of one question from its retrieved `hits` and a pool of other passages' texts (easy
    negatives are drawn from those not retrieved); none when no retrieved unit is a positive.
    """
    rng = random.Random(f"{rules.seed}\x1f{question.id}")
    split = split_of(question, rules.validation_share)
    spans = unit_spans_of([h.text for h in hits], stored)
    labelled: dict[str, tuple[str, float]] = {}  # scored text -> (unit, recall); the first occurrence wins
    for i, (_, text, _, _) in enumerate(spans):
        labelled.setdefault(scored_text(spans, i), (text, context_token_recall(text, question.answers)))
    ranked = sorted(labelled.items(), key=lambda kv: -kv[1][1])  # stable: retrieval order among equals
    positives = [kv for kv in ranked if kv[1][1] >= rules.positive_recall][: rules.positives]
    if not positives:
        return []
    negatives = [kv for kv in labelled.items() if kv[1][1] <= rules.negative_recall]
    hard = rng.sample(negatives, min(rules.hard_negatives, len(negatives)))
    retrieved = {h.text for h in hits}
    easy: list[tuple[str, tuple[str, float]]] = []
    candidates = [t for t in pool if t not in retrieved]
    for _ in range(4 * rules.easy_negatives):  # a few tries: a random unit may hold the reference's words
        if len(easy) >= rules.easy_negatives or not candidates:
            break
        other = unit_spans_of([rng.choice(candidates)], stored)
        if not other:
            continue
        i = rng.randrange(len(other))
        recall = context_token_recall(other[i][1], question.answers)
        if recall <= rules.negative_recall:
            easy.append((scored_text(other, i), (other[i][1], recall)))

    def pair(item: tuple[str, tuple[str, float]], kind: PairKind) -> ScorerPair:
        scored, (unit, recall) = item
        label = 1.0 if kind == "positive" else 0.0
        return ScorerPair(
            question_id=question.id,
            question=question.question,
            unit=unit,
            scored=scored,
            label=label,
            kind=kind,
            recall=round(recall, 4),
            split=split,
        )

    return [pair(p, "positive") for p in positives] + [pair(h, "hard") for h in hard] + [pair(e, "easy") for e in easy]


def build_pairs(
    questions: Sequence[Question],
    retriever: Retriever,
    stored: SentenceVectors,
    pool: Sequence[str],
    rules: PairRules | None = None,
    progress: Progress | None = None,
) -> PairSet:
    """Every question's pairs (`label_question`) through `retriever`, with easy negatives from `pool` (the
    index's passage texts).
    """
    rules = rules or PairRules()
    tick = progress or (lambda stage, done, total: None)
    pairs: list[ScorerPair] = []
    without = 0
    for n, q in enumerate(questions, start=1):
        hits = retriever.retrieve(q.question, rules.retrieve_n, rules.retrieval)
        mine = label_question(q, hits, stored, pool, rules)
        without += not mine
        pairs += mine
        tick("label training pairs", n, len(questions))
    return PairSet(pairs, len(questions), without)


def passage_pool(table: Any, limit: int = 50_000) -> list[str]:
    """The passage texts of an index's chunk table (at most `limit`, in table order): where easy negatives
    are drawn from.
    """
    rows = table.search().select(["text"]).limit(max(1, min(limit, table.count_rows()))).to_arrow()
    return [str(t) for t in rows.column("text").to_pylist()]


def write_pairs(path: Path, pairs: Sequence[ScorerPair]) -> None:
    """The pairs as JSON lines, atomically."""
    from corpus.load import write_jsonl

    write_jsonl(path, [p.model_dump(mode="json") for p in pairs])


def read_pairs(path: Path) -> list[ScorerPair]:
    """Pairs written by `write_pairs`."""
    return [p for _, p in read_jsonl(path, ScorerPair)]
