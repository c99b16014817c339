"""Offline claim-level faithfulness: is each claim of the answer supported by the context?

No LLM judge (a 135M judge is noise): a claim is supported when one context sentence (or two adjacent ones)
covers its content words (lexical), or is close in meaning (embedding) while covering most of them, and the
finer checks hold against that span: every number and capitalised name of the claim is in it (a name of
another sentence of the same context does not count, nor a number of the span's other sentence); each
clause of the claim has the polarity of the span clause that says most of it ("not" is not a stop word
here); names sit in that clause, not in a neighbouring one, and in the same order unless the voice changed
(active/passive); no superlative, ordinal, direction or comparative is added. Demonyms count as their place
("Polish" = "Poland"). Each claim keeps its evidence: the span, both scores, each check and the reason for
the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from corpus.embed import Embedder, VectorCache
from corpus.text import (
    GLUED,
    PASSAGE_MARKER,
    PRONOUN_START,
    canonical_words,
    content_words,
    name_tokens,
    normalize,
    passage_heads,
    sentence_spans,
    title_at,
)
from eval.faithfulness.align import aligned, copied, substituted
from eval.faithfulness.claims import _SLOT, split_claims
from eval.faithfulness.question import answers_what_is_asked, fills_the_slot, restated_fill
from eval.store.rows import ClaimVerdict


class FaithfulnessResult(BaseModel):
    """Supported / total claims, with every verdict; score None when the answer claims nothing."""

    score: float | None
    status: str
    """ok | no_claims (abstained or empty answer)"""
    claims: list[ClaimVerdict]


_BORROWED = 2
"""Content words of other sentences of the context, absent from the span, from which a claim recombines."""


def _with_pieces(tokens: Sequence[str]) -> set[str]:
    """`tokens` and the pieces of those a compressor glued together ("moscow1533": "moscow", "1533")."""
    out = set(tokens)
    for t in tokens:
        m = GLUED.match(t)
        if m:
            out.update(p for p in m.groups() if p)
    return out


@dataclass
class _Plan:
    """One answer's claims, its context's candidate spans and the lexical scores, before embedding."""

    claims: list[str]
    spans: list[str]
    titles: set[str]
    span_titles: list[set[str]]
    """Per span: the words of the title of the passage(s) it sits in ("Its capital is Nuuk" under "Greenland")."""
    premise: set[str]
    """Words of the question the context does not have (a compressor dropped them): restating them is not a
    claim about the context ("... by Robert Millikan in 1909" where the question gives 1909). Names count
    only when the context has another name of the question: "Ferdowsi was born in Balkh" from a passage on
    Rumi alone is a swap."""
    per_claim: list[tuple[list[float], list[int]]]
    """Per claim: lexical score of every span, and the finalists: the spans covering most of the claim's
    words (a sentence preferred to the pairs that hold it); more than one only when they tie."""
    meaning: list[bool]
    """Per claim: does its verdict depend on the embedder (a tie to break, or a coverage in the band where
    closeness in meaning decides)?"""

    def texts(self) -> list[str]:
        """The texts whose vectors the verdicts need."""
        needed = [i for i, m in enumerate(self.meaning) if m]
        return [*(self.claims[i] for i in needed), *(self.spans[j] for i in needed for j in self.per_claim[i][1])]


def _finalists(lexical: list[float], n_sentences: int) -> list[int]:
    """The spans with the best coverage; a pair of sentences drops out when one of its sentences covers as
    much (the sentence is the more precise evidence), so a tie remains only between distinct spans.
    """
    top = max(lexical)
    best = [j for j, score in enumerate(lexical) if score == top]
    held = {j for j in best if j < n_sentences}
    return [j for j in best if j < n_sentences or not {j - n_sentences, j - n_sentences + 1} & held]


class ClaimChecker:
    """Decides claims against a context with lexical and embedding evidence."""

    def __init__(
        self,
        embedder: Embedder,
        lexical_alone: float = 0.8,
        lexical_with_meaning: float = 0.5,
        meaning: float = 0.6,
    ) -> None:
        self.embedder = embedder
        self.lexical_alone = lexical_alone
        self.lexical_with_meaning = lexical_with_meaning
        self.meaning = meaning
        self._vectors = VectorCache(embedder, 100_000)  # the same passages come back in every setting

    def check(
        self, answer: str, context: str, question: str | None = None, cut: bool | None = None
    ) -> FaithfulnessResult:
        """Split `answer` into claims (`question` lets a restated question count as none; `cut`: the engine
        stopped at the token limit, None when not known) and check each.
        """
        return self.check_many([(answer, context, question)], [cut])[0]

    def check_many(
        self, items: Sequence[tuple[str, str, str | None]], cut: Sequence[bool | None] | None = None
    ) -> list[FaithfulnessResult]:
        """`check` for many (answer, context, question) triples, with one embedding call for all of them: a
        sweep checks a whole setting at once, and batching the spans of every answer (sorted by length
        inside the embedder) costs a fraction of one call per answer.
        """
        cuts = list(cut) if cut is not None else [None] * len(items)
        plans = [self._plan(a, c, q, stop) for (a, c, q), stop in zip(items, cuts, strict=True)]
        texts = [t for plan in plans if plan is not None for t in plan.texts()]
        unique = list(dict.fromkeys(texts))
        vectors = dict(zip(unique, self._vectors(unique), strict=True)) if unique else {}
        return [
            FaithfulnessResult(score=None, status="no_claims", claims=[])
            if plan is None
            else self._decide(plan, vectors, context, question)
            for plan, (_, context, question) in zip(plans, items, strict=True)
        ]

    def _plan(self, answer: str, context: str, question: str | None, cut: bool | None) -> _Plan | None:
        """Claims, candidate spans and their lexical scores: everything but the embeddings."""
        claims = split_claims(answer, question, context, cut)
        if not claims:
            return None
        sentences = [(s, e) for s, e, _ in sentence_spans(context)] or [(0, len(context))]
        # Single sentences and adjacent pairs: "It lies in ..." needs the sentence before it to name "It". A
        # pair across two passages says nothing (its words count for no claim).
        heads = passage_heads(context)
        passage = [sum(at <= s for at, _ in heads) for s, _ in sentences]
        spans = [context[s:e] for s, e in sentences]
        spans += [context[a[0] : b[1]] for a, b in zip(sentences, sentences[1:], strict=False)]
        apart = [False] * len(sentences) + [a != b for a, b in zip(passage, passage[1:], strict=False)]
        span_words = [
            set() if cut_off else _with_pieces(content_words(s)) for s, cut_off in zip(spans, apart, strict=True)
        ]
        premise = set()
        if question:
            known = _with_pieces(canonical_words(context))
            # A name is a premise only where the context has another name of the question (a compressor
            # dropped this one); with none of them, retrieval missed and a name is a claim to check.
            names = set(name_tokens(question))
            missed = names and not names & known
            premise = {t for t in canonical_words(question) if t not in known and not (missed and t in names)}
        titles = {t for _, words in heads for t in words}
        own = [title_at(heads, s) for s, _ in sentences]
        span_titles = own + [a | b for a, b in zip(own, own[1:], strict=False)]
        # The embedder is asked only where it can change a verdict: to break a tie between distinct spans
        # that cover the claim equally, or when the coverage is in the band where meaning decides. Most
        # claims are decided by their words alone, which keeps the checker cheap on long contexts.
        per_claim, meaning = [], []
        for claim in claims:
            all_words = content_words(claim)
            words = [w for w in all_words if w not in premise] or all_words
            lexical = [sum(w in sw for w in words) / len(words) for sw in span_words]
            # Identical texts (a sentence repeated in two passages) are one finalist: no tie to break.
            by_text = {spans[j]: j for j in reversed(_finalists(lexical, len(sentences)))}  # first index kept
            finalists = sorted(by_text.values())
            # Below the band no span can support the claim: which one is shown as evidence does not matter.
            top = lexical[finalists[0]]
            finalists = finalists if top >= self.lexical_with_meaning else finalists[:1]
            per_claim.append((lexical, finalists))
            meaning.append(len(finalists) > 1 or self.lexical_with_meaning <= top < self.lexical_alone)
        return _Plan(claims, spans, titles, span_titles, premise, per_claim, meaning)

    def _decide(
        self, plan: _Plan, vectors: dict[str, np.ndarray], context: str, question: str | None
    ) -> FaithfulnessResult:
        """Each claim's verdict from its plan and the embeddings."""
        spans, titles = plan.spans, plan.titles
        # Words the context has but a claim's span lacks: two of them recombine the context ("the term
        # 'hiking' describes all forms of walking" where the span's word is "walking", "hiking" another's).
        elsewhere = set(content_words(context)) - set(content_words(question or "")) - plan.premise
        verdicts = []
        for i, (claim, (lexical, finalists)) in enumerate(zip(plan.claims, plan.per_claim, strict=True)):
            best, sem = finalists[0], None
            if plan.meaning[i]:
                sims = [float(vectors[spans[j]] @ vectors[claim]) for j in finalists]
                pick = max(range(len(finalists)), key=lambda t: (sims[t], -t))
                best, sem = finalists[pick], sims[pick]
            span_tokens = _with_pieces(canonical_words(spans[best])) | plan.premise
            claim_tokens = canonical_words(PASSAGE_MARKER.sub(" ", claim))
            numbers_ok = all(t in span_tokens for t in claim_tokens if any(c.isdigit() for c in t))
            names_ok = all(t in span_tokens or t in plan.span_titles[best] for t in name_tokens(claim))
            lex = lexical[best]
            close = lex >= self.lexical_alone or (lex >= self.lexical_with_meaning and (sem or 0.0) >= self.meaning)
            polarity_ok, roles_ok, attributes_ok = aligned(claim, spans[best], titles)
            roles_ok &= not substituted(claim, spans[best], plan.span_titles[best])
            roles_ok &= sum(w not in span_tokens and w in elsewhere for w in set(content_words(claim))) < _BORROWED
            # A short claim is the answer when it stands alone or is a bare phrase ("2018" after a copy).
            short = len(plan.claims) == 1 or len(normalize(claim).split()) <= 2
            slot_ok = fills_the_slot(claim, question, context) if question and short else None
            if question and slot_ok is None and _SLOT.search(question):
                fill = restated_fill(claim, question)
                slot_ok = fills_the_slot(fill, question, context) if fill else None
            elif (
                question
                and slot_ok is None
                and not _copies_about(claim, spans[best], span_tokens - plan.premise, plan.span_titles[best], question)
            ):
                slot_ok = answers_what_is_asked(claim, question, context)
            checks = {
                "a number the supporting sentence does not have": numbers_ok,
                "a name the supporting sentence does not have": names_ok,
                "negated where the context is not, or the reverse": polarity_ok,
                "a name, number or words of another clause in its role": roles_ok,
                "an attribute (superlative, ordinal, direction) the context does not state": attributes_ok,
                "no sentence of the context says this": close,
                "the context does not have this where the question asks": slot_ok is not False,
            }
            failed = [why for why, ok in checks.items() if not ok]
            verdicts.append(
                ClaimVerdict(
                    claim=claim,
                    best_span=spans[best],
                    lexical=lex,
                    semantic=sem,
                    numbers_ok=numbers_ok,
                    names_ok=names_ok,
                    supported=not failed,
                    polarity_ok=polarity_ok,
                    roles_ok=roles_ok,
                    attributes_ok=attributes_ok,
                    reason="; ".join(failed),
                    slot_ok=slot_ok,
                )
            )
        score = sum(v.supported for v in verdicts) / len(verdicts)
        return FaithfulnessResult(score=score, status="ok", claims=verdicts)


def _copies_about(claim: str, span: str, span_words: set[str], title: set[str], question: str) -> bool:
    """A verbatim copy of the span says what it copies: it need not answer the question, as long as it
    is about the question's subject (not "He was born in Kiel" under "Max Planck" for Einstein's birth).
    """
    if not copied(claim, span):
        return False
    names = set(name_tokens(question))
    if PRONOUN_START.match(claim):  # "It serves as ..." is about its passage's subject
        return not names or bool(names & title)
    return not names or bool(names & (span_words | title))
