"""A labelled faithfulness set built from a corpus: faithful spans vs other-passage, swapped-name and
swapped-number answers. Deterministic: the same corpus gives the same set.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from pydantic import BaseModel

from corpus.models import Document
from corpus.text import sentence_spans
from eval.faithfulness.checker import ClaimChecker

_NAME = re.compile(r"(?<!^)(?<![.!?] )\b[A-Z][a-z]{3,}\b")
_NUMBER = re.compile(r"\b\d{2,4}\b")


class LabelledCase(BaseModel):
    """An answer, its context, and whether it is faithful to it."""

    kind: str
    """span | short_span | other_passage | swapped_name | swapped_number"""
    answer: str
    context: str
    faithful: bool


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def build_cases(docs: Sequence[Document], n: int = 100) -> list[LabelledCase]:
    """Up to 5 cases per document for the first `n` usable documents (ordered by sha256 of id)."""
    pool = sorted((d for d in docs if len(sentence_spans(d.text)) >= 2), key=lambda d: _h(d.id))
    names_pool = [m for d in pool[: 4 * n] for m in _NAME.findall(d.text)]
    cases: list[LabelledCase] = []
    for i, doc in enumerate(pool[:n]):
        context = f"[1] {doc.title}: {doc.text}"
        sentences = [doc.text[s:e] for s, e, _ in sentence_spans(doc.text)]
        sentence = sentences[int(_h(doc.id + "s"), 16) % len(sentences)]
        words = sentence.split()
        cases.append(LabelledCase(kind="span", answer=sentence, context=context, faithful=True))
        if len(words) > 8:
            start = int(_h(doc.id + "w"), 16) % (len(words) - 6)
            cases.append(
                LabelledCase(
                    kind="short_span", answer=" ".join(words[start : start + 7]), context=context, faithful=True
                )
            )
        other = pool[(i + n // 2 + 1) % len(pool)]
        other_sents = [other.text[s:e] for s, e, _ in sentence_spans(other.text)]
        cases.append(LabelledCase(kind="other_passage", answer=other_sents[0], context=context, faithful=False))
        names = [m for m in _NAME.findall(sentence) if m.lower() not in doc.title.lower()]
        if names:
            target = names[0]
            foreign = [x for x in names_pool if x not in doc.text]
            if foreign:
                swap = foreign[int(_h(doc.id + "n"), 16) % len(foreign)]
                cases.append(
                    LabelledCase(
                        kind="swapped_name", answer=sentence.replace(target, swap, 1), context=context, faithful=False
                    )
                )
        numbers = _NUMBER.findall(sentence)
        if numbers:
            old = numbers[0]
            new = str(int(old) + 1 + int(_h(doc.id + "d"), 16) % 7)
            cases.append(
                LabelledCase(
                    kind="swapped_number",
                    answer=re.sub(rf"\b{old}\b", new, sentence, count=1),
                    context=context,
                    faithful=False,
                )
            )
    return cases


class ValidationReport(BaseModel):
    """Accuracy of the checker's verdicts (positive = faithful) overall and per kind."""

    n: int
    accuracy: float
    precision: float
    recall: float
    by_kind: dict[str, float]


def validate(checker: ClaimChecker, cases: Sequence[LabelledCase]) -> ValidationReport:
    """Verdict = every claim supported (score 1.0)."""
    predicted = [checker.check(c.answer, c.context).score == 1.0 for c in cases]
    tp = sum(p and c.faithful for p, c in zip(predicted, cases, strict=True))
    fp = sum(p and not c.faithful for p, c in zip(predicted, cases, strict=True))
    fn = sum(not p and c.faithful for p, c in zip(predicted, cases, strict=True))
    correct = [p == c.faithful for p, c in zip(predicted, cases, strict=True)]
    kinds = sorted({c.kind for c in cases})
    by_kind = {
        k: sum(ok for ok, c in zip(correct, cases, strict=True) if c.kind == k) / sum(c.kind == k for c in cases)
        for k in kinds
    }
    return ValidationReport(
        n=len(cases),
        accuracy=sum(correct) / len(cases),
        precision=tp / max(1, tp + fp),
        recall=tp / max(1, tp + fn),
        by_kind=by_kind,
    )
