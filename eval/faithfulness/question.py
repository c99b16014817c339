"""Question-aware checks of a claim: does a short answer (or the fill of a restated question) stand where
the question's slot is in the context, and do the names a claim adds sit in the clause that states what is
asked? Used by eval/faithfulness/checker.py.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import lru_cache

from corpus.text import (
    BLANK_PREFIX,
    GLUED,
    PRONOUN_START,
    canonical,
    canonical_words,
    content_words,
    entities,
    name_tokens,
    normalize,
    passage_heads,
    sentence_spans,
    title_at,
    word_family,
)
from eval.faithfulness.align import clauses
from eval.faithfulness.claims import _SLOT


def _unglue(text: str) -> str:
    """`text` (normalised) with every glued word and number apart ("published1" -> "published 1")."""
    return " ".join(" ".join(p for p in m.groups() if p) if (m := GLUED.match(t)) else t for t in text.split())


def answers_what_is_asked(claim: str, question: str, context: str) -> bool | None:
    """For a claim answering a question without a slot ("The official language of Monaco is Italian."):
    the names and numbers it adds to the question must sit in the context clause that states what the
    question asks (the clause with most of the question's words). None when the claim adds none, or no
    clause states all of the question's predicate.
    """
    asked = set(content_words(question))
    names = set(name_tokens(question))
    added = [t for t in name_tokens(claim) if t not in asked] + [
        t for t in canonical_words(claim) if any(c.isdigit() for c in t) and t not in asked
    ]
    # The question's subject under a longer name ("Amazon.com" for "Amazon") adds its other words.
    added += [t for e in _entities(claim) if e & names for t in e - names if t not in asked]
    predicate = {word_family(w) for w in asked - names}
    # The question's one subject as its answer ("Madagascar." for its capital), not a choice ("Muse or Coldplay").
    subjects = _entities(question)
    bare = len(subjects) == 1 and _entities(claim) == subjects and len(normalize(claim).split()) <= 3
    bare &= " or " not in f" {question.lower()} "
    if not predicate or not (added or bare):
        return None
    scored = [
        (
            len(predicate & c.stems),
            len(names & c.tokens),
            c.tokens | c.subject,
            c.text,
            # A clause's subject may stand before an aside: "Beijing, previously Peking, is the capital".
            _names_the_subject(names, predicate, c.raw, c.around),
        )
        for c in _context_clauses(context)
    ]
    if not scored or max(s[0] for s in scored) < len(predicate):
        return None
    # Of the clauses that state the predicate, those naming the question's subject as such come first
    # ("Islamabad is the nation's capital" in the Pakistan passage; not "the capital of the Pakistani
    # province of Punjab"), then those with most of its names.
    best = max((p, ok, n) for p, n, _, _, ok in scored)
    stating = [(tokens, clause) for p, n, tokens, clause, ok in scored if (p, ok, n) == best]
    if any(_subject_for_another(claim, names, predicate, clause, bare) for _, clause in stating):
        return False
    if bare:
        return None
    return any(all(t in tokens for t in added) for tokens, _ in stating)


@dataclass(frozen=True)
class _Clause:
    """A clause of the context as `answers_what_is_asked` reads it."""

    text: str
    raw: tuple[str, ...]
    """Its normalised words as written ("Pakistani" is no name)."""
    tokens: frozenset[str]
    stems: frozenset[str]
    subject: frozenset[str]
    """Words of its sentence's first clause, and the passage title where the sentence starts with a pronoun
    ("It is China's most populous city" under "Shanghai")."""
    around: frozenset[str]
    """Words of its sentence's first clause as written, and its passage's title."""


@lru_cache(maxsize=64)
def _context_clauses(context: str) -> tuple[_Clause, ...]:
    """Every clause of `context`, parsed once per context: an answer's claims, and the answers of one
    question in every setting, are checked against the same passages.
    """
    heads = passage_heads(context)
    out = []
    for s, e, _ in sentence_spans(context):
        parts = clauses(context[s:e])
        said = normalize(parts[0]).split() if parts else []
        subject = set(canonical(said))
        title = title_at(heads, s)
        around = frozenset(set(said) | title)
        if PRONOUN_START.match(context[s:e]):
            subject |= title
        for clause in parts:
            raw = normalize(clause).split()
            tokens = canonical(raw)
            stems = frozenset(word_family(t) for t in tokens)
            out.append(_Clause(clause, tuple(raw), frozenset(tokens), stems, frozenset(subject), around))
    return tuple(out)


def _names_the_subject(names: set[str], predicate: set[str], raw: Sequence[str], around: AbstractSet[str]) -> bool:
    """Does a clause (its normalised words `raw`) name the question's subject: by name, in its sentence's
    subject or passage title (`around`), or by a demonym right before the predicate ("the Japanese capital";
    not "the capital of the Pakistani province of Punjab")?
    """
    if names & (set(raw) | around):
        return True
    tokens = canonical(list(raw))
    at = [i for i, t in enumerate(tokens) if word_family(t) in predicate]
    return any(t in names for i in at for t in tokens[max(0, i - 2) : i])


def _subject_for_another(claim: str, names: set[str], predicate: set[str], clause: str, bare: bool = False) -> bool:
    """Does the claim answer with the question's own subject, under a longer name ("The headquarter of
    Microsoft is Microsoft Corporation", "The founder of Amazon is Amazon.com") or alone (`bare`:
    "Madagascar." for its capital), where the clause that states the predicate names another one right after
    it ("headquartered in Redmond", "Founded in 1994 by Jeff", "capital and largest city is Antananarivo")?
    What follows "of" is the predicate's own complement ("the capital of the Grand Duchy of Luxembourg").
    """
    entities = _entities(claim)
    longer = any(e & names and e - names for e in entities)
    if not (longer or bare) or any(not e & names for e in entities):
        return False  # a name of its own is an answer the other checks judge
    tokens = canonical_words(clause)
    others = set(name_tokens(clause)) - names - set(canonical_words(claim))
    at = [i for i, t in enumerate(tokens) if word_family(t) in predicate]
    if not at:
        return False
    window = tokens[at[0] + 1 : at[0] + 7]
    window = window[: window.index("of")] if "of" in window else window
    return any(t in others for t in window)


def _entities(text: str) -> list[set[str]]:
    """The words of each capitalised name of `text` ("Amazon.com": {"amazon", "com"})."""
    return [set(e) for e in entities(text)]


_PREPOSITIONS = {"in", "on", "from", "since", "until", "by", "around", "to", "at", "about"}


def fills_the_slot(answer: str, question: str, context: str) -> bool | None:
    """Does the context hold a short answer where the question's slot is: both neighbours of the slot next
    to it ("from 1961 to" for "... from which year to 1962?")? None when the question has no slot inside it
    or the answer is not short.
    """
    question, m = _slot(question)
    words = normalize(answer).split()
    if m is None or m.start() == 0 or not 1 <= len(words) <= 4:
        return None
    left2 = normalize(question[: m.start()] + _prep(m)).split()[-2:]
    right2 = normalize(question[m.end() :]).split()[:2]
    left, right = left2[-1:], right2[:1]
    if m.group().startswith("how many") and right and words[-1] == right[0]:
        words = words[:-1]  # "6,400 km" for "how many km"
    if words and words[0] in _PREPOSITIONS:
        words = words[1:]  # "in 1889" for "in which year"
    if not words:
        return None
    # A compressor may glue a word to a number ("published1"): they are two words here.
    hay, phrase = f" {_unglue(normalize(context))} ", " ".join(words)
    if any(f" {' '.join([*a, phrase, *b])} " in hay for a, b in ((left2, right2), (left, right2), (left2, right))):
        return True  # the answer between the slot's neighbours
    # The neighbours may differ (a dropped aside): each one next to the answer, and the answer only once.
    if hay.count(f" {phrase} ") != 1:
        return False
    # A number may stand without its scale word ("72" for "had 72 million members").
    after = (
        [phrase, *(f"{phrase} {scale}" for scale in ("thousand", "million", "billion"))]
        if phrase.isdigit()
        else [phrase]
    )
    return (not left or f" {' '.join([*left, phrase])} " in hay) and (
        not right or any(f" {' '.join([a, *right])} " in hay for a in after)
    )


def _slot(question: str) -> tuple[str, re.Match[str] | None]:
    """The question without its "Fill in the blank:" prefix, and its slot."""
    question = BLANK_PREFIX.sub("", question)
    return question, _SLOT.search(question)


def _prep(m: re.Match[str]) -> str:
    """The preposition that belongs before the slot's answer ("in" of "in which year", "by" of "by whom")."""
    return " " + (m.group("prep") or ("by" if m.group().startswith("by ") else ""))


def restated_fill(claim: str, question: str) -> str | None:
    """What a claim that restates the question puts in its slot: the words between the slot's neighbours
    ("... known as the Neckar river and lies ..." for "known as the ___ and lies"); None when the claim
    does not restate them, names none of the question's names (then it says the same of another subject:
    "El Salvador's capital is San Salvador" for "Honduras's capital is ___") or the fill is longer than a
    short answer.
    """
    question, m = _slot(question)
    names = set(name_tokens(question))
    if m is None or (names and not names & set(name_tokens(claim))):
        return None
    before = normalize(question[: m.start()] + _prep(m)).split()[-3:]
    after = normalize(question[m.end() :]).split()[:3]
    words = normalize(claim).split()
    for k in range(len(before), 1, -1):
        starts = [i + k for i in range(len(words) - k + 1) if words[i : i + k] == before[-k:]]
        if starts:
            break
    else:
        return None
    start = starts[0]
    if not after:
        fill = words[start:]
    else:
        later = range(start + 1, len(words))
        ends = [j for k in range(len(after), 0, -1) for j in later if words[j : j + k] == after[:k]]
        if not ends:
            return None
        fill = words[start : ends[0]]
    return " ".join(fill) if 1 <= len(fill) <= 4 else None
