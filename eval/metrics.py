"""Answer-quality metrics; each declares its direction so the gate never hard-codes it."""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation + "‘’“”–—"})


def normalize(text: str) -> str:
    """SQuAD-style normalisation: fold accents and case, drop punctuation and articles, squeeze spaces."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)  # 8,611 == 8611
    text = text.translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _contains(haystack: str, golds: Sequence[str]) -> float:
    hay = f" {normalize(haystack)} "
    return float(any(f" {g} " in hay for g in (normalize(x) for x in golds) if g))


def answer_contains(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when some gold answer (normalised, whole words) occurs in the prediction."""
    return _contains(prediction, golds)


def answer_token_recall(prediction: str, golds: Sequence[str]) -> float:
    """Best over golds of the share of gold tokens present in the prediction (multiset)."""
    pred = Counter(normalize(prediction).split())
    best = 0.0
    for gold in golds:
        toks = Counter(normalize(gold).split())
        if toks:
            best = max(best, sum((pred & toks).values()) / sum(toks.values()))
    return best


def context_answer_recall(context: str, golds: Sequence[str]) -> float:
    """1.0 when the final (reranked, compressed) context still contains a gold answer."""
    return _contains(context, golds)


@dataclass(frozen=True)
class Metric:
    """A named score in [0, 1] with its direction."""

    name: str
    higher_is_better: bool
    fn: Callable[[str, Sequence[str]], float]
    on: str
    """Which text it reads: 'answer' or 'context'."""


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("answer_contains", True, answer_contains, "answer"),
        Metric("answer_token_recall", True, answer_token_recall, "answer"),
        Metric("context_answer_recall", True, context_answer_recall, "context"),
    )
}
