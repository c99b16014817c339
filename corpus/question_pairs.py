"""Question pairs for the semantic answer cache: which pairs must hit, which must not.

From the same rules as `corpus.questions`, per grounded sentence of a document:

- **paraphrase** (same fact, should hit): the wh-question of a date, year, number or agent, and the cloze
  of the same answer span ("X was built in which year?" / "Fill in the blank: X was built in ___");
- **near miss, attribute** (must not hit): two questions about different slots of the same sentence
  ("... in which year ...?" / "... how many km ...?"): almost the same words, a different answer;
- **near miss, entity** (must not hit): the same question about another document's subject (the title
  swapped for the next document's title of the same kind of question): same template, different entity.

Every pair carries both questions' gold answers, so a hit can be judged right or wrong.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

from pydantic import BaseModel, ConfigDict

from corpus.models import Document
from corpus.questions import _PAREN, QuestionRules, _candidates, _grounded, _subject
from corpus.text import occurrences, sentence_spans


class QuestionPair(BaseModel):
    """Two questions and whether the cache may serve one with the other's answer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    kind: str
    """paraphrase | near_miss_attribute | near_miss_entity"""
    a: str
    b: str
    answers_a: list[str]
    answers_b: list[str]
    should_hit: bool
    doc_id: str


def _pair(kind: str, doc_id: str, a: str, b: str, answers_a: list[str], answers_b: list[str]) -> QuestionPair:
    pid = "pair-" + hashlib.sha256(f"{kind}\x1f{a}\x1f{b}".encode()).hexdigest()[:16]
    return QuestionPair(
        id=pid, kind=kind, a=a, b=b, answers_a=answers_a, answers_b=answers_b,
        should_hit=kind == "paraphrase", doc_id=doc_id,
    )  # fmt: skip


def _doc_pairs(doc: Document, rules: QuestionRules) -> Iterator[tuple[QuestionPair, str, str]]:
    """Pairs within one document, and (question, kind) of each wh-question for entity swaps."""
    subject = _subject(doc)
    for start, end, _ in sentence_spans(doc.text):
        sentence = _grounded(_PAREN.sub("", doc.text[start:end].strip()), subject)
        if sentence is None or not rules.min_words <= len(sentence.split()) <= rules.max_words:
            continue
        found = [
            (kind, q, aliases)
            for kind, q, aliases in _candidates(sentence)
            if occurrences(doc.text, aliases[0]) == 1 and not occurrences(subject, aliases[0])
            and not occurrences(q, aliases[0])
        ]  # fmt: skip
        wh = [c for c in found if c[0] != "cloze"]
        for kind, q, aliases in wh:
            if occurrences(sentence, aliases[0]) == 1:
                at = sentence.find(aliases[0])
                if at >= 0:
                    cloze = "Fill in the blank: " + (sentence[:at] + "___" + sentence[at + len(aliases[0]) :]).rstrip(
                        " ."
                    )
                    yield _pair("paraphrase", doc.id, q, cloze, aliases, aliases), kind, subject
        for (_, q1, a1), (_, q2, a2) in zip(wh, wh[1:], strict=False):
            if a1[0] != a2[0]:
                yield _pair("near_miss_attribute", doc.id, q1, q2, a1, a2), "", subject


def question_pairs(docs: Iterable[Document], rules: QuestionRules | None = None) -> list[QuestionPair]:
    """Paraphrase and near-miss pairs over `docs`, ordered by sha256 of the pair id (a deterministic shuffle)."""
    rules = rules or QuestionRules()
    pairs: list[QuestionPair] = []
    previous: dict[str, tuple[str, str]] = {}  # kind -> (question, subject) of the last document with one
    for doc in docs:
        for pair, kind, subject in _doc_pairs(doc, rules):
            pairs.append(pair)
            if pair.kind != "paraphrase":
                continue
            other = previous.get(kind)
            if other and other[1] and subject and other[1] != subject and occurrences(pair.a, subject) == 1:
                swapped = pair.a.replace(subject, other[1])
                if swapped != pair.a:  # the same question about another subject: its answer is unknown here
                    pairs.append(_pair("near_miss_entity", doc.id, pair.a, swapped, pair.answers_a, []))
            previous[kind] = (pair.a, subject)
    unique = {p.id: p for p in pairs}
    return sorted(unique.values(), key=lambda p: hashlib.sha256(p.id.encode()).hexdigest())
