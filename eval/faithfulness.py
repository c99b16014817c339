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


def split_claims(answer: str) -> list[str]:
    """One claim per sentence (a short answer is one claim); abstentions claim nothing."""
    if abstained(answer):
        return []
    claims = [answer[s:e].strip() for s, e, _ in sentence_spans(answer)]
    return [c for c in claims if _content(c)]


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

    def check(self, answer: str, context: str) -> FaithfulnessResult:
        """Split `answer` into claims and check each against `context`."""
        claims = split_claims(answer)
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
