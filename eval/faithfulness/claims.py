"""What counts as a claim of an answer: its assertions, not list numbers, lead-ins, code or the question."""

from __future__ import annotations

import re

from corpus.text import PASSAGE_HEADING, PASSAGE_MARKER, canonical, content_words, normalize, sentence_spans
from eval.metrics import abstained, without_disclaimers

_SLOT = re.compile(
    r"\b(?:(?P<prep>in|on|from|since|until|by|around|to) which (?:year|date)|how many|by whom|by what|___+)(?=\W|$)"
)
"""A slot inside a question: "... from which year to 1962?", "how many km", "Fill in the blank: ... ___ ..."."""


_FENCE = re.compile(r"```.*?(```|$)", re.S)
_LIST_MARK = re.compile(r"^\s*(?:\(?\d{1,3}[.)]|[-*•]|[a-z][.)])(?=\s|$)\s*")
_LONG = 12
"""Words from which an answer ending mid-sentence was cut off by the token limit (48 tokens by default)."""
_FRAGMENT = 4
"""Content words from which the unfinished last sentence of a cut answer is a claim."""
_FINISHED = re.compile(r"[.!?\"'”’)\]]\s*$")
_ANSWER = r"(?:so,? )?(?:the )?(?:final |short |correct )?answer"
_ANSWER_IS = re.compile(rf"\s*{_ANSWER}\b", re.I)
_LEAD_IN = re.compile(
    rf"^\s*(?:{_ANSWER}(?: to (?:this|the|your) question)?"
    r"(?: is| would be)?|answer|"
    r"according to (?:the )?(?:context|passages?|text|crib sheet)|based on (?:the )?(?:context|passages?|text)|"
    r"(?:the )?passages? (?:is|are|says?|states?|reads?)|"
    r"(?:the )?passages? (?:you provided |provided )?(?:also )?(?:(?:provides?|gives?|contains?|includes?)"
    r"(?: (?:some |a brief |brief |detailed )?(?:information|overview|details|description))(?: (?:about|of|on))?|"
    r"(?:mentions?|discusses?|describes?)(?: (?:some |a brief |brief |detailed )?(?:information|overview|details|"
    r"description)(?: (?:about|of|on))?)?)|passage|"
    rf"{PASSAGE_HEADING.pattern})(?=\W|$)"
    r"\s*[:,-]?\s*",
    re.I,
)


def split_claims(
    answer: str, question: str | None = None, context: str | None = None, cut: bool | None = None
) -> list[str]:
    """The assertions of an answer, one per sentence (a short answer is one claim). `context` tells a word
    cut by the token limit from a whole one; `cut` says whether the engine stopped at the limit (None: not
    known, guessed from the text).

    Not claims: abstentions, code fences, list numbers ("3."), lead-ins ("The answer is:", "According to
    the context,": the rest of the sentence is the claim), a sentence ending in ":" (it announces, asserts
    nothing), a restated question (no content word beyond the question's), and anything without a content
    word. In an answer cut by the token limit (when not known: a long answer whose prose ends mid-sentence)
    the unfinished last sentence is a claim only with `_FRAGMENT` content words, less a last word cut
    short. An answer with none of them gets status `no_claims`, never a score.
    """
    if abstained(answer):
        return []
    text = _FENCE.sub(" ", answer)  # a disclaimer beside claims is dropped sentence by sentence (below)
    asked = set(content_words(question)) if question else set()
    claims = []
    raw_lines = [line for line in text.splitlines() if line.strip()]
    lines = [_unlist(line) for line in raw_lines]
    sentences = [line[s:e] for line in lines for s, e, _ in sentence_spans(line)]
    # A list item needs no full stop ("- Reykjavik is the capital of Iceland"): only prose is cut.
    if cut is None:
        cut = len(text.split()) >= _LONG and not (raw_lines and _LIST_MARK.match(raw_lines[-1]))
    for i, sentence in enumerate(sentences):
        claim = _LIST_MARK.sub("", sentence)
        answers = bool(_ANSWER_IS.match(claim))
        for _ in range(3):  # "The passage is: [1] Title: 1. ..." peels in steps
            claim = _LEAD_IN.sub("", claim).strip()
            rest = _LIST_MARK.sub("", claim)
            claim = rest if content_words(rest) else claim  # "1. Taiwan is ..." but not "8." alone
        answers = answers and len(claim.split()) <= 3  # "The answer is: 2018", not "...: Beirut has been"
        if i == len(sentences) - 1 and cut and answers and context and not _FINISHED.search(claim):
            claim = _drop_cut_word(claim, context)  # "The answer is: Hang" for "Hangzhou", "1" for "1885"
        elif i == len(sentences) - 1 and cut and not _FINISHED.search(claim):
            # Cut off by the token limit (a long answer ending mid-sentence; a short one, or one after "The
            # answer is:", needs no full stop):
            # an unfinished fragment ("San Marino is the fifth") asserts nothing yet; a longer one asserts
            # what stands before the cut.
            claim = _drop_cut_word(claim, context)
            if len(content_words(claim)) < _FRAGMENT:
                continue
        claim = without_disclaimers(claim)  # "..., but the passages do not say who" asserts only its first part
        words = content_words(claim)
        if not words or claim.endswith(":") or (asked and set(words) <= asked and claim.rstrip().endswith("?")):
            continue
        if asked and set(words) <= asked and len(words) >= 2 and not _SLOT.search(question or ""):
            continue  # the question restated as a statement: nothing the context has to support
        claims.append(claim)
    return claims


def _unlist(line: str) -> str:
    """`line` without its list number, also after a lead-in ("The answer is: 1. Taiwan is ..."); a number
    alone after a lead-in is an answer ("The answer is: 8.").
    """
    line = _LIST_MARK.sub("", line)
    lead = _LEAD_IN.match(line)
    if lead and ":" in lead.group() and lead.end() < len(line):
        rest = line[lead.end() :]
        listed = _LIST_MARK.match(rest)
        if listed and rest[listed.end() :].strip():
            return line[: lead.end()] + rest[listed.end() :]
    return line


def _drop_cut_word(claim: str, context: str | None) -> str:
    """`claim` without its last word when the token limit cut it: a word the context has only as the start
    of a longer one ("in 13" for "in 1336", "Call" for "Callisto"); without a context, any last word.
    """
    head, _, last = claim.rstrip().rpartition(" ")
    word = (normalize(last).split() or [""])[-1]  # "Cambodian–Viet": its last piece
    if context is None or not word:
        return head
    words = set(normalize(PASSAGE_MARKER.sub(" ", context)).split())
    whole = word in words or canonical([word])[0] in set(canonical(list(words)))  # "Japan" where it says "Japanese"
    return head if not whole and any(w.startswith(word) for w in words) else claim
