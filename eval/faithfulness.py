"""Offline claim-level faithfulness: is each claim of the answer supported by the context?

No LLM judge (a 135M judge is noise): a claim is supported when one context sentence covers its content
words (lexical), or is close in meaning (embedding) while covering most of them; every number and every
capitalised name in the claim must also occur in the context, which catches swapped entities and figures
that similarity alone misses. Each claim keeps its evidence: the best span and both scores.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from corpus.chunk import sentence_spans
from corpus.embed import Embedder, VectorCache
from corpus.normalize import STOP, normalize
from eval.metrics import abstained

_NAME = re.compile(r"\b[A-Z][a-zA-Z\u00C0-\u024F'-]+")


class ClaimVerdict(BaseModel):
    """The evidence behind one claim's verdict."""

    claim: str
    best_span: str
    lexical: float
    """Share of the claim's content words found in the best span."""
    semantic: float
    """Cosine similarity of claim and best span (embedder)."""
    numbers_ok: bool
    names_ok: bool
    supported: bool


class FaithfulnessResult(BaseModel):
    """Supported / total claims, with every verdict; score None when the answer claims nothing."""

    score: float | None
    status: str
    """ok | no_claims (abstained or empty answer)"""
    claims: list[ClaimVerdict]


_FENCE = re.compile(r"```.*?(```|$)", re.S)
_LIST_MARK = re.compile(r"^\s*(?:\(?\d{1,3}[.)]|[-*•]|[a-z][.)])(?=\s|$)\s*")
_LEAD_IN = re.compile(
    r"^\s*(?:(?:so,? )?(?:the )?(?:final |short |correct )?answer(?: is| would be)?|answer|"
    r"according to (?:the )?(?:context|passages?|text|crib sheet)|based on (?:the )?(?:context|passages?|text))"
    r"\s*[:,-]?\s*",
    re.I,
)


def split_claims(answer: str, question: str | None = None) -> list[str]:
    """The assertions of an answer, one per sentence (a short answer is one claim).

    Not claims: abstentions, code fences, list numbers ("3."), lead-ins ("The answer is:", "According to
    the context,": the rest of the sentence is the claim), a sentence ending in ":" (it announces, asserts
    nothing), a restated question (no content word beyond the question's), and anything without a content
    word. An answer with none of them gets status `no_claims`, never a score.
    """
    if abstained(answer):
        return []
    text = _FENCE.sub(" ", answer)
    asked = set(_content(question)) if question else set()
    claims = []
    lines = [_LIST_MARK.sub("", line) for line in text.splitlines()]
    sentences = [line[s:e] for line in lines for s, e, _ in sentence_spans(line)]
    for sentence in sentences:
        claim = _LEAD_IN.sub("", _LIST_MARK.sub("", sentence)).strip()
        words = _content(claim)
        if not words or claim.endswith(":") or (asked and set(words) <= asked and claim.rstrip().endswith("?")):
            continue
        if asked and set(words) <= asked and len(words) >= 2:
            continue  # the question restated as a statement: nothing the context has to support
        claims.append(claim)
    return claims


def _content(text: str) -> list[str]:
    return [w for w in normalize(text).split() if w not in STOP]


class ClaimChecker:
    """Decides claims against a context with lexical and embedding evidence."""

    def __init__(
        self,
        embedder: Embedder,
        lexical_alone: float = 0.8,
        lexical_with_meaning: float = 0.5,
        meaning: float = 0.6,
        max_candidates: int = 4,
    ) -> None:
        self.embedder = embedder
        self.lexical_alone = lexical_alone
        self.lexical_with_meaning = lexical_with_meaning
        self.meaning = meaning
        self.max_candidates = max_candidates
        self._vectors = VectorCache(embedder, 100_000)  # the same passages come back in every setting

    def check(self, answer: str, context: str, question: str | None = None) -> FaithfulnessResult:
        """Split `answer` into claims (`question` lets a restated question count as none) and check each."""
        claims = split_claims(answer, question)
        if not claims:
            return FaithfulnessResult(score=None, status="no_claims", claims=[])
        sentences = [(s, e) for s, e, _ in sentence_spans(context)] or [(0, len(context))]
        # Single sentences and adjacent pairs: "It lies in ..." needs the sentence before it to name "It".
        spans = [context[s:e] for s, e in sentences]
        spans += [context[a[0] : b[1]] for a, b in zip(sentences, sentences[1:], strict=False)]
        span_words = [set(_content(s)) for s in spans]
        context_tokens = set(normalize(context).split())
        # Meaning only matters for spans that cover enough words to support a claim at all; embedding just
        # those (a handful per claim, in one call per answer) keeps the checker cheap on long contexts.
        plans = []
        for claim in claims:
            words = _content(claim)
            lexical = [sum(w in sw for w in words) / len(words) for sw in span_words]
            candidates = [j for j in range(len(spans)) if lexical[j] >= self.lexical_with_meaning]
            candidates = sorted(candidates, key=lambda j: (-lexical[j], j))[: self.max_candidates]
            plans.append((lexical, candidates or [max(range(len(spans)), key=lambda j: (lexical[j], -j))]))
        texts = list(dict.fromkeys([*claims, *(spans[j] for _, cands in plans for j in cands)]))
        vectors = dict(zip(texts, self._vectors(texts), strict=True))
        verdicts = []
        for claim, (lexical, candidates) in zip(claims, plans, strict=True):
            sims = [float(vectors[spans[j]] @ vectors[claim]) for j in candidates]
            pick = max(range(len(candidates)), key=lambda t: (lexical[candidates[t]] + sims[t], -t))
            best, sem = candidates[pick], sims[pick]
            claim_tokens = normalize(claim).split()
            numbers_ok = all(t in context_tokens for t in claim_tokens if any(c.isdigit() for c in t))
            names_ok = all(
                t in context_tokens for n in _NAME.findall(claim) for t in normalize(n).split() if t not in STOP
            )
            lex = lexical[best]
            supported = (
                numbers_ok
                and names_ok
                and (lex >= self.lexical_alone or (lex >= self.lexical_with_meaning and sem >= self.meaning))
            )
            verdicts.append(
                ClaimVerdict(
                    claim=claim,
                    best_span=spans[best],
                    lexical=lex,
                    semantic=sem,
                    numbers_ok=numbers_ok,
                    names_ok=names_ok,
                    supported=supported,
                )
            )
        score = sum(v.supported for v in verdicts) / len(verdicts)
        return FaithfulnessResult(score=score, status="ok", claims=verdicts)
