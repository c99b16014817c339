"""Answer-quality metrics; each declares its direction so the gate never hard-codes it."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from corpus.text import STOP, contains, content_tokens, normalize, sentence_spans

__all__ = ["normalize"]

_SOURCE = r"(the )?(passages?|context|text|documents?|crib sheet|sources?|information( given| provided)?)"
_ABSTAIN = re.compile(
    r"^\W*(unknown|n/?a|no answer|not sure|unsure|none given)\W*$"
    r"|\bi (do not|don't|dont|cannot|can't) (know|tell|say|answer|find)\b"
    r"|\bi('m| am) (not sure|unsure|unable)\b"
    r"|\b(cannot|can't|can ?not|unable to|impossible to) (be )?(answer|determine|find|tell|say|know)"
    rf"|\b{_SOURCE} (does|do|did)( not|n't) (contain|say|mention|state|specify|include|provide|give|tell|answer)"
    rf"|\b(is|are|was|were)? ?(not|never) (mentioned|stated|given|provided|specified|contained|found|included)"
    rf" (in|by|within) {_SOURCE}"
    r"|^\W*(it is )?not (mentioned|stated|specified|given|provided)\W*$"
    rf"|\bno (information|mention|answer|data|details?)\b.*\b(in|about|on|from|regarding) {_SOURCE}"
    r"|\b(there is|there's) no (information|mention|answer)\b"
    r"|\bnot enough information\b|\binsufficient information\b"
    r"|\b(do|does|did)( not|n't) (contain|provide|include|give|state|mention) (the|an|any) answer\b"
    r"|\banswer (is|was) not (provided|given|stated|mentioned|included)\b"
)
_HEDGE_SPLIT = re.compile(r",|;| or | either ")
_LIST_SPLIT = re.compile(r",|;|\band\b|\bor\b")
_CONTRAST = re.compile(r";|\b(?:but|however|although|though|whereas)\b", re.I)
"""Where a sentence turns: an answer may assert one part and decline the other ("K2 is 8,611 m high, but
the passages do not say who climbed it first")."""


def _contains(haystack: str, golds: Sequence[str]) -> float:
    return float(contains(haystack, golds))


def hedged(prediction: str, golds: Sequence[str]) -> bool:
    """The prediction names several alternatives, so it commits to none of them: two or more joined by "or"
    ("Paris or London"), or a bare list of three or more names whatever joins them ("Paris, London, Rome,
    Berlin"; not a sentence with commas, whose parts are not all short names).
    """
    text = normalize(prediction)
    if " or " in f" {text} ":
        items = [i.strip() for i in _HEDGE_SPLIT.split(f" {prediction.lower()} ") if i.strip()]
        items = [normalize(i) for i in items if len(i.split()) <= 6]
    else:
        items = [normalize(i) for i in _LIST_SPLIT.split(prediction) if normalize(i)]
        names = [i for i in items if len(i.split()) <= 3 and not set(i.split()) & STOP]
        if len(items) < 3 or len(names) < len(items):
            return False
    hits = [any(f" {normalize(g)} " in f" {i} " for g in golds if normalize(g)) for i in items]
    return len(items) >= 2 and any(hits) and not all(hits)


def answer_contains(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when some gold answer (normalised, whole words) occurs in the prediction, and the prediction does
    not hedge between several candidates.
    """
    return 0.0 if hedged(prediction, golds) else _contains(prediction, golds)


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals some normalised gold answer (empty never matches)."""
    pred = normalize(prediction)
    return float(bool(pred) and any(pred == normalize(g) for g in golds))


def _overlap(prediction: str, gold: str) -> tuple[int, int, int]:
    pred, ref = Counter(normalize(prediction).split()), Counter(normalize(gold).split())
    return sum((pred & ref).values()), sum(pred.values()), sum(ref.values())


def _content_recall(text: str, golds: Sequence[str]) -> float:
    have = Counter(normalize(text).split())
    best = 0.0
    for gold in golds:
        want = Counter(content_tokens(gold))
        if want:
            best = max(best, sum((want & have).values()) / sum(want.values()))
    return best


def answer_token_recall(prediction: str, golds: Sequence[str]) -> float:
    """Best over golds of the share of the gold's content tokens (function words dropped, multiset) present in
    the prediction; 0 when the prediction hedges. For a reference that is a phrase or a sentence this is the
    meaningful match: a paraphrase that keeps its content scores high, a verbatim string match would not.
    """
    return 0.0 if hedged(prediction, golds) else _content_recall(prediction, golds)


def context_token_recall(context: str, golds: Sequence[str]) -> float:
    """Best over golds of the share of the gold's content tokens present in the final context: what a
    compressor kept of a phrase- or sentence-long answer (a dropped "the" or comma costs nothing).
    """
    return _content_recall(context, golds)


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


def _declines(text: str) -> bool:
    return bool(_ABSTAIN.search(" ".join(text.lower().replace("’", "'").split())))


def without_disclaimers(answer: str) -> str:
    """`answer` less its sentences, and clauses of a sentence that turns ("..., but ..."), that decline to
    answer; the rest is what the answer asserts.
    """
    kept = []
    for s, e, _ in sentence_spans(answer):
        sentence = answer[s:e]
        if not _declines(sentence):
            kept.append(sentence)
            continue
        parts = [p.strip(" ,") for p in _CONTRAST.split(sentence)]
        if len(parts) > 1:
            kept.extend(p for p in parts if p and not _declines(p))
    return " ".join(kept)


def abstained(answer: str) -> bool:
    """Did the model only say it cannot answer from the context? An answer that asserts something beside a
    disclaimer ("Paris was founded in 1200 by Clovis. The context does not mention who designed it.") did
    not abstain: its claims are scored. An empty output is not an abstention (it is no answer at all); a
    negative statement about the world ("not found in Europe") is not either.
    """
    if not _declines(answer):
        return False
    return not [w for w in normalize(without_disclaimers(answer)).split() if w not in STOP]


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
        Metric("context_token_recall", True, context_token_recall, "context"),
    )
}

DIRECTIONS: dict[str, bool] = {
    **{name: m.higher_is_better for name, m in METRICS.items()},
    "faithfulness": True,
    "faithfulness_model": True,  # the model verifier's share of supported claims (sweep --verifier)
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
    "citation_precision": True,  # cited-json settings: citations that point at a gold document
    "citation_recall": True,
}
"""Direction of every stored column a gate may compare (True: higher is better)."""

POPULATIONS: dict[str, str] = {
    **{name: "answerable" for name in METRICS},
    "abstained": "unanswerable",
}
"""Which questions a metric is meant for: answer metrics on answerable questions (an unanswerable one has no
right answer to contain), abstention on unanswerable ones; any other column on all questions."""


def cohen_kappa(pairs: Sequence[tuple[Hashable, Hashable]]) -> float | None:
    """Cohen's kappa of two raters' verdicts, over every label either uses (the store's v_judge_agreement
    computes the same for yes/no); None when undefined (no pairs, or chance agreement 1).
    """
    if not pairs:
        return None
    n = len(pairs)
    observed = sum(a == b for a, b in pairs) / n
    first, second = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    chance = sum(first[label] * second[label] for label in first.keys() | second.keys()) / n / n
    return None if chance >= 1.0 else (observed - chance) / (1 - chance)
