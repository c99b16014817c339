"""Semantic answer cache (lever 4): a question close enough to one already answered reuses its answer and
skips retrieval, compression and generation.

Within a setting, questions are taken in file order; the cache holds the questions the engine answered so
far (a hit is never a source). A question is a hit when the cosine similarity of its embedding to a cached
question is at least the threshold; the most similar one is the source. Cached answers are scored against
the hit question's own gold answers, like any other row, and marked (`cache_hit_of`, `cache_similarity`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from corpus.normalize import STOP
from eval.citations import score_citations
from eval.sample import CachePart, CompressionPart, GenerationPart, ProbePart, SampleDraft
from eval.scoring import score_answer

_SPECIFIC = re.compile(r"\d[\d,.]*\d|\d|\b[A-Z][\w'-]*")
_PREFIX = re.compile(r"^\s*fill in the blank:\s*", re.IGNORECASE)
_POSSESSIVE = re.compile(r"['’]s?$")


_FUNCTION_WORDS = frozenset(
    "What Who Whom Whose When Where Which Why How The A An In On At Of For From By To With Is Was Are Were "
    "Did Does Do Has Have Had It Its This That These Those There According".split()
)

_ANSWER_TYPE = {
    **dict.fromkeys("when year years date century decade".split(), "time"),
    **dict.fromkeys("where city town village country nation place location".split(), "place"),
    **dict.fromkeys(
        "who whom whose person people man woman artist author writer poet painter composer architect scientist "
        "inventor leader ruler king queen astronaut explorer player entrepreneur founder".split(),
        "person",
    ),
    **dict.fromkeys("many number".split(), "count"),
}
"""Words that say what kind of thing the answer is ("where" and "in which city" both ask for a place)."""
_WH = frozenset("when where who whom whose many".split())
"""Answer-type words that are only that (an "author" or a "city" is a content word as well)."""
_DIMENSION = {
    "tall": "height", "high": "height", "deep": "depth", "long": "length", "wide": "width", "old": "age",
    "heavy": "weight", "fast": "speed", "far": "distance", "big": "size", "large": "size", "hot": "temperature",
}  # fmt: skip
""""How tall" asks for the height: the adjective after "how" stands for its noun."""
_NEGATION = frozenset("not no never nor none neither".split())
_FRAME = frozenset(
    "name named called tell know please can could would exactly located situated "
    "become became come came go went take took happen happened occur occurred up out".split()
)
"""Words that frame a question without changing what it asks ("Can you tell me ...", light verbs: "When
did X happen?", "When did X come to an end?")."""
WORD_MATCH = 0.8
"""Cosine between two words' embeddings at which one may stand for the other ("tallest" / "highest"):
chosen on hand-written tuning pairs (benchmarks/answer_cache.py)."""


def specifics(question: str) -> frozenset[str]:
    """The numbers and capitalised names of a question (question and function words aside): what makes it
    about this entity and this attribute rather than a neighbour's.
    """
    text = _PREFIX.sub("", question.strip())
    found = (_POSSESSIVE.sub("", m.group(0).rstrip(".,")) for m in _SPECIFIC.finditer(text))
    return frozenset(w for w in found if w not in _FUNCTION_WORDS and w.lower() not in _FRAME)


def same_specifics(a: str, b: str) -> bool:
    """The first guard in front of a hit: both questions name the same numbers and names. A close embedding
    with another entity or another number ("... in 1889 ... how many metres" vs "... in which year ... 330
    metres") is a near miss, never a hit. A name may lose its capital in the other question ("Radium was
    discovered by whom?" / "Who discovered radium?").
    """
    names_a, names_b = specifics(a), specifics(b)
    words_a, words_b = (set(re.findall(r"[\w'-]+", _PREFIX.sub("", q).lower())) for q in (a, b))
    return all(n.lower() in words_b for n in names_a - names_b) and all(n.lower() in words_a for n in names_b - names_a)


def asked(question: str) -> tuple[frozenset[str], dict[str, str]]:
    """What a question asks for, in lower-case words: the answer types its wh-phrase names ("where", "in
    which city"; "*" for a cloze's blank), and its content words (5-letter stems -> the word), names among
    them (the first guard has compared the names; a name both questions share cancels out).
    """
    text = _PREFIX.sub("", question.strip())
    words = re.findall(r"[A-Za-z]{2,}", text)
    lowered = [w.lower() for w in words]
    types = frozenset(
        _ANSWER_TYPE[w] if w in _WH else _ANSWER_TYPE[lowered[i + 1]]
        for i, w in enumerate(lowered)
        if (w in _WH and (words[i].islower() or words[i] in _FUNCTION_WORDS))
        or (w in ("which", "what") and i + 1 < len(lowered) and lowered[i + 1] in _ANSWER_TYPE)
    ) | ({"*"} if "___" in text else set())  # "*": a cloze's blank asks for any kind of answer
    lowered = [_DIMENSION.get(w, w) if i and lowered[i - 1] == "how" else w for i, w in enumerate(lowered)]
    content = {w[:5]: w for w in lowered if w not in STOP and w not in _FRAME and w not in _WH}
    if any(w in _NEGATION for w in lowered):
        content["not"] = "not"
    return types, content


_AUX = re.compile(r"\b(?:did|does|do)\b", re.IGNORECASE)
_COPULA = re.compile(r"\b(?:is|was|are|were)\b|['’]s\b", re.IGNORECASE)
_PASSIVE = re.compile(r"\bby (?:whom|which|what)\b|\b(?:was|were|is|are) \w+(?:ed|en|wn)\b", re.IGNORECASE)


def name_role(question: str) -> str | None:
    """Whether a question's first name is the subject ("Whom did Victoria succeed?") or the object ("Who
    succeeded Victoria?", "Hamlet was written by whom?") of its verb; None when it cannot tell (a copula:
    "Who was Victoria's husband?").
    """
    text = _PREFIX.sub("", question.strip())
    name = next((m for m in _SPECIFIC.finditer(text) if m.group(0) not in _FUNCTION_WORDS), None)
    if name is None:
        return None
    before = text[: name.start()]
    if _PASSIVE.search(text):
        return "object"
    if _AUX.search(before):
        return "subject"
    if _COPULA.search(before) or not re.match(r"\s*(?:who|whom|what|which)\b", text, re.IGNORECASE):
        return None
    return "object"


def same_ask(a: str, b: str, word_similarity: Callable[[str, str], float], word_match: float = WORD_MATCH) -> bool:
    """The second guard: both questions ask for the same thing. Their answer types, where both name one,
    must meet ("where" vs "when" is a near miss), and every content word only one of them has must stand for
    one only the other has (`word_similarity` >= WORD_MATCH: "biggest" for "largest", not "smallest" for
    "largest" nor "old" for "tall"). A word added with no counterpart ("Who *served* as ...") is a miss:
    the cache prefers a recomputed answer to a wrong one.
    """
    types_a, words_a = asked(a)
    types_b, words_b = asked(b)
    if types_a and types_b and not types_a & types_b and "*" not in types_a | types_b:
        return False
    roles = {name_role(a), name_role(b)}
    if roles == {"subject", "object"}:
        return False
    only_a = [w for s, w in words_a.items() if s not in words_b]
    only_b = [w for s, w in words_b.items() if s not in words_a]
    for mine, theirs, their_types in ((only_a, only_b, types_b), (only_b, only_a, types_a)):
        for word in mine:
            if word in _ANSWER_TYPE and (not their_types or {"*", _ANSWER_TYPE[word]} & their_types):
                continue  # "Which author wrote X?" asks what "Who wrote X?" asks
            if not theirs or max(word_similarity(word, other) for other in theirs) < word_match:
                return False
    return True


def question_guard(
    word_vector: Callable[[str], np.ndarray], word_match: float = WORD_MATCH
) -> Callable[[str, str], bool]:
    """Both guards, with words compared by the cosine of their (unit) vectors from `word_vector`."""

    def similarity(x: str, y: str) -> float:
        return float(word_vector(x) @ word_vector(y))

    return lambda a, b: same_specifics(a, b) and same_ask(a, b, similarity, word_match)


@dataclass(frozen=True)
class CacheHit:
    """The answered question a hit reuses, at what similarity, and what the lookup cost."""

    source: str
    similarity: float
    lookup_s: float


@dataclass
class CacheLookups:
    """The cache's verdict per question: the hits, and what the lookup cost every question (hit or not)."""

    hits: dict[str, CacheHit]
    lookup_s: dict[str, float]


def cache_hits(
    ids: Sequence[str],
    embed: Callable[[int], np.ndarray],
    threshold: float,
    texts: Sequence[str] | None = None,
    guard: Callable[[str, str], bool] = same_specifics,
) -> CacheLookups:
    """Which questions (by id, in order) would be served by the cache at `threshold`; `embed(i)` gives the
    unit vector of question i (the lookup time counts it). With `texts`, the most similar cached question
    must also pass `guard` (new question, cached question), else the question goes to the engine.
    """
    matrix: np.ndarray | None = None
    answered: list[int] = []
    hits: dict[str, CacheHit] = {}
    lookups: dict[str, float] = {}
    for i, qid in enumerate(ids):
        start = time.perf_counter()
        v = embed(i)
        if matrix is None:
            matrix = np.empty((len(ids), v.shape[0]), dtype=np.float32)
        if answered:
            sims = matrix[: len(answered)] @ v
            best = int(np.argmax(sims))
            source = answered[best]
            if float(sims[best]) >= threshold and (texts is None or guard(texts[i], texts[source])):
                lookups[qid] = time.perf_counter() - start
                hits[qid] = CacheHit(ids[source], float(sims[best]), lookups[qid])
                continue
        matrix[len(answered)] = v
        answered.append(i)
        lookups[qid] = time.perf_counter() - start
    return CacheLookups(hits, lookups)


def serve_hits(drafts: Sequence[SampleDraft], cache: CacheLookups, probes: set[str]) -> None:
    """Give each hit draft its source's answer and context, scored against its own gold answers (and gold
    documents, for citations); a probed hit's end-to-end latency is its lookup (latency, as for any request,
    only on the probe sample).
    """
    by_id = {d.key.question_id: d for d in drafts}
    for d in drafts:
        hit = cache.hits.get(d.key.question_id)
        if hit is None:
            continue
        src = by_id[hit.source]
        d.cache = CachePart(cache_hit_of=hit.source, cache_similarity=hit.similarity)
        if src.generation is None or src.error is not None:
            d.fail("answer cache", f"the cached question {hit.source} has no answer")
            continue
        context = src.compression.context_text if src.compression else None
        d.compression = CompressionPart(
            context_chunk_ids=src.compression.context_chunk_ids if src.compression else "[]", context_text=context
        )
        d.generation = GenerationPart(answer=src.generation.answer, prompt_tokens=0, cached_tokens=0, ttft_s=None)
        if src.citation is not None and src.citation.citations is not None:
            d.citation = score_citations(json.loads(src.citation.citations), src.passage_docs or [], d.gold_docs or [])
        elif src.citation is not None:
            d.citation = src.citation  # the source's answer did not follow the schema: neither does this one
        d.scores = score_answer(src.generation.answer, context or "", d.key.gold_answers)
        if d.key.question_id in probes:
            d.probe = ProbePart(e2e_latency_s=hit.lookup_s, e2e_cold_s=hit.lookup_s, e2e_paid_s=hit.lookup_s)


def add_lookups(drafts: Sequence[SampleDraft], cache: CacheLookups) -> None:
    """A probed miss paid the cache lookup before the rest of its bill: add it to its end-to-end latency."""
    for d in drafts:
        lookup = cache.lookup_s.get(d.key.question_id)
        if d.cache is not None or d.probe is None or lookup is None:
            continue
        p = d.probe
        keys = ("e2e_latency_s", "e2e_cold_s", "e2e_paid_s")
        d.probe = p.model_copy(update={k: getattr(p, k) + lookup for k in keys if getattr(p, k) is not None})
