"""What counts as a claim of an answer: its assertions, not list numbers, lead-ins, code or the question."""

from __future__ import annotations

import re

from corpus.chunk import sentence_spans
from corpus.normalize import STOP, normalize
from corpus.normalize import canonical as _canon
from eval.metrics import abstained

_SLOT = re.compile(
    r"\b(?:(?P<prep>in|on|from|since|until|by|around|to) which (?:year|date)|how many|by whom|by what|___+)(?=\W|$)"
)
"""A slot inside a question: "... from which year to 1962?", "how many km", "Fill in the blank: ... ___ ..."."""


def content_words(text: str) -> list[str]:
    """Normalised words without function words, demonyms as their place."""
    return _canon([w for w in normalize(text).split() if w not in STOP])


_FENCE = re.compile(r"```.*?(```|$)", re.S)
_LIST_MARK = re.compile(r"^\s*(?:\(?\d{1,3}[.)]|[-*•]|[a-z][.)])(?=\s|$)\s*")
_LEAD_IN = re.compile(
    r"^\s*(?:(?:so,? )?(?:the )?(?:final |short |correct )?answer(?: is| would be)?|answer|"
    r"according to (?:the )?(?:context|passages?|text|crib sheet)|based on (?:the )?(?:context|passages?|text)|"
    r"(?:the )?passages? (?:is|are|says?|states?|reads?)|passage|\[\d+\][^:]{0,80}:)"
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
    asked = set(content_words(question)) if question else set()
    claims = []
    lines = [_LIST_MARK.sub("", line) for line in text.splitlines()]
    sentences = [line[s:e] for line in lines for s, e, _ in sentence_spans(line)]
    for sentence in sentences:
        claim = _LIST_MARK.sub("", sentence)
        for _ in range(3):  # "The passage is: [1] Title: ..." peels in steps
            claim = _LEAD_IN.sub("", claim).strip()
        words = content_words(claim)
        if not words or claim.endswith(":") or (asked and set(words) <= asked and claim.rstrip().endswith("?")):
            continue
        if asked and set(words) <= asked and len(words) >= 2 and not _SLOT.search(question or ""):
            continue  # the question restated as a statement: nothing the context has to support
        claims.append(claim)
    return claims
