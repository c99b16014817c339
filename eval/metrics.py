"""Answer-quality metrics; each declares its direction so the gate never hard-codes it."""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans(dict.fromkeys(string.punctuation + "‘’“”–—", " "))
_ABSTAIN = re.compile(
    r"\b(i (do not|don't|dont) know|(cannot|can't|can ?not|unable to) (be )?(answer|determine|find|tell)"
    r"|not (mentioned|stated|given|provided|found|contained|in the (passages?|context))"
    r"|no (information|mention|answer)|(passages?|context) (does|do) not (contain|say|mention|state))\b"
)


def normalize(text: str) -> str:
    """SQuAD-style normalisation: fold accents and case, drop punctuation and articles, squeeze spaces."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)  # 8,611 == 8611
    text = re.sub(r"(?<=\d)\.(?=\d)", "point", text)  # 3.14 stays one token, so it never contains "3"
    text = text.translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _contains(haystack: str, golds: Sequence[str]) -> float:
    hay = f" {normalize(haystack)} "
    return float(any(f" {g} " in hay for g in (normalize(x) for x in golds) if g))


def answer_contains(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when some gold answer (normalised, whole words) occurs in the prediction."""
    return _contains(prediction, golds)


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals some normalised gold answer (empty never matches)."""
    pred = normalize(prediction)
    return float(bool(pred) and any(pred == normalize(g) for g in golds))


def _overlap(prediction: str, gold: str) -> tuple[int, int, int]:
    pred, ref = Counter(normalize(prediction).split()), Counter(normalize(gold).split())
    return sum((pred & ref).values()), sum(pred.values()), sum(ref.values())


def answer_token_recall(prediction: str, golds: Sequence[str]) -> float:
    """Best over golds of the share of gold tokens present in the prediction (multiset)."""
    return max((common / n_ref for common, _, n_ref in (_overlap(prediction, g) for g in golds) if n_ref), default=0.0)


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    """Best over golds of the token-level F1 (SQuAD)."""
    best = 0.0
    for gold in golds:
        common, n_pred, n_ref = _overlap(prediction, gold)
        if common:
            p, r = common / n_pred, common / n_ref
            best = max(best, 2 * p * r / (p + r))
    return best


def context_answer_recall(context: str, golds: Sequence[str]) -> float:
    """1.0 when the final (reranked, compressed) context still contains a gold answer."""
    return _contains(context, golds)


def abstained(answer: str) -> bool:
    """Did the model say it cannot answer from the context (rather than answer)?"""
    return bool(_ABSTAIN.search(answer.lower().replace("’", "'"))) or not answer.strip()


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
        Metric("answer_exact_match", True, exact_match, "answer"),
        Metric("answer_token_f1", True, token_f1, "answer"),
        Metric("answer_token_recall", True, answer_token_recall, "answer"),
        Metric("context_answer_recall", True, context_answer_recall, "context"),
    )
}

DIRECTIONS: dict[str, bool] = {
    **{name: m.higher_is_better for name, m in METRICS.items()},
    "faithfulness": True,
    "abstained": True,  # on unanswerable questions; the gate reads it there only
    "retrieval_recall": True,
    "ttft_s": False,
    "probe_ttft_s": False,
    "e2e_latency_s": False,
    "e2e_cold_s": False,
    "e2e_paid_s": False,
    "prompt_tokens": False,
    "compress_seconds": False,
    "compress_cold_seconds": False,
}
"""Direction of every stored column a gate may compare (True: higher is better)."""

POPULATIONS: dict[str, str] = {
    **{name: "answerable" for name in METRICS},
    "abstained": "unanswerable",
}
"""Which questions a metric is meant for: answer metrics on answerable questions (an unanswerable one has no
right answer to contain), abstention on unanswerable ones; any other column on all questions."""
