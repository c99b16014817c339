"""How a claim lines up with the span that supports it, clause by clause: polarity, which name or number
fills which role, and the attribute words it keeps (the finer checks of eval/faithfulness/checker.py).
"""

from __future__ import annotations

import difflib
import os
import re

from corpus.text import (
    LEADING_TITLE,
    PASSAGE_HEADING,
    PASSAGE_MARKER,
    PRONOUN,
    STOP,
    canonical_words,
    content_words,
    entities,
    name_tokens,
    negated,
    sentence_spans,
    stem,
)

# Clause breaks inside a sentence: punctuation (not a digit group's comma: "534,842") or a contrast word.
_CLAUSE = re.compile(
    r"(?<!\d),|,(?!\d)|[;:()]|\b(?:although|though|while|whereas|but)\b|\band(?= (?:is|was|are|were|has|had)\b)", re.I
)
_ATTRIBUTE = re.compile(
    r"^(\w{3,}est|first|second|third|fourth|fifth|last|final|north|south|east|west|northern|southern|eastern|"
    r"western|central|upper|lower|inner|outer|early|late|earlier|later|ancient|modern|major|minor|most|least|"
    r"larger|smaller|higher|older|younger|longer|shorter|bigger|greater|fewer|more|less|public|private|male|"
    r"female|maximum|minimum|increase|decrease|before|after)$"
)


_NOT_ATTRIBUTE = {
    "forest", "interest", "contest", "protest", "request", "honest", "modest", "harvest", "digest", "arrest",
    "invest", "suggest", "manifest", "conquest", "inquest", "behest", "priest", "chest", "guest", "quest",
}  # fmt: skip
"""Words ending in "est" that are no superlatives."""


def aligned(claim: str, span: str, titles: set[str]) -> tuple[bool, bool, bool]:
    """(polarity, roles, attributes) of each claim clause against the span clause that says most of it."""
    span_sentences = _sentences(span)
    span_clauses = _split(span_sentences) or [span]
    sentences = [set(canonical_words(PASSAGE_MARKER.sub(" ", s))) for s in span_sentences]
    claim_words = set(content_words(claim))
    polarity_ok = roles_ok = attributes_ok = True
    for cc in clauses(claim):
        words = set(content_words(cc))
        cc_names = name_tokens(cc)  # "Everest" or "Budapest" is no superlative
        overlap = [len(words & set(content_words(c))) for c in span_clauses]
        tied = [c for c, n in zip(span_clauses, overlap, strict=True) if n == max(overlap)]
        sc = tied[0]
        sc_tokens = set(canonical_words(sc))
        # Any of the clauses that say most of it may be the one it restates ("He was not president in 1950").
        polarity_ok &= any(negated(cc) == negated(c) for c in tied)
        attributes = [w for w in words if _ATTRIBUTE.match(w) and w not in _NOT_ATTRIBUTE and w not in cc_names]
        attributes_ok &= any(all(w in set(canonical_words(c)) for w in attributes) for c in tied)
        names = [t for t in cc_names if t not in titles]
        sc_names = [t for t in name_tokens(sc) if t not in titles]
        # A claim may name what a pronoun of the span stands for ("Arequipa is the seat of ..." for "Arequipa
        # is a city in Peru. It is the seat of ..."): the span's subject (its first name) is then not in
        # another clause's role; an object of the earlier clause is. A claim that keeps the pronoun has no
        # name to resolve it to.
        resolved = len(PRONOUN.findall(sc)) > len(PRONOUN.findall(cc)) and span_clauses.index(sc) > 0
        subject = set((_entities(span_clauses[0]) or [""])[0].split()) if resolved else set()
        elsewhere = {t for c in span_clauses if c is not sc for t in name_tokens(c)} - subject
        roles_ok &= _numbers_in_role(cc, words, claim_words, sentences) and _numbers_after_same_words(cc, span)
        if sc_names:  # a clause without names leaves the subject to its neighbours ("..., at 8,611 metres")
            roles_ok &= not any(t not in sc_tokens and t in elsewhere for t in names)
            shared = [t for t in dict.fromkeys(names) if t in sc_names]
            flipped = (" by " in f" {cc.lower()} ") != (" by " in f" {sc.lower()} ")  # active <-> passive
            # Only a clause that has the claim's predicate restates it in another voice: "The Little Prince was
            # published in France" is not the passive of "... illustrated by French writer ...".
            predicate = (words - set(cc_names)) & set(content_words(sc))
            if flipped and predicate:  # whole names swap places, not their words ("Quincy Jones produced it")
                theirs = _entities(sc)
                # A claim's name stands for the span's name that holds all its words ("Linnaeus", "Carl Linnaeus").
                places = [
                    next((i for i, e in enumerate(theirs) if set(m.split()) <= set(e.split())), None)
                    for m in _entities(cc)
                ]
                at = list(dict.fromkeys(p for p in places if p is not None))
                roles_ok &= len(at) < 2 or at != sorted(at)  # the voice flipped, so must the order
            elif len(shared) >= 2:
                order = sorted(shared, key=sc_names.index)
                roles_ok &= order == shared
    return polarity_ok, roles_ok, attributes_ok


def _entities(text: str) -> list[str]:
    """The names of `text` as whole entities ("wendell meredith stanley"), in order, each once."""
    return list(dict.fromkeys(" ".join(e) for e in entities(text)))


def _numbers_in_role(claim_clause: str, words: set[str], claim_words: set[str], sentences: list[set[str]]) -> bool:
    """No number of the claim clause comes from another sentence of the span than the one that says most
    of it ("president since 2003" where 2003 starts another office in the next sentence). Within a sentence
    a date may stand anywhere ("In 1856, she became ..." = "She became ... in 1856").
    """
    numbers = [t for t in canonical_words(PASSAGE_MARKER.sub(" ", claim_clause)) if t[0].isdigit()]  # not "K2"
    # Ranked by the clause's words, then by the whole claim's ("for 103 weeks" is about the claim's sentence).
    rank = [(len(words & tokens), len(claim_words & tokens)) for tokens in sentences]
    best = [tokens for tokens, r in zip(sentences, rank, strict=True) if r == max(rank)]
    if not numbers or any(all(t in tokens for t in numbers) for tokens in best):
        return True  # one of the sentences that say most of it (ties: "Founded in 1636, ... it is ...")
    # A swap: the sentence's own number is gone and one of another sentence stands in its place. A claim that
    # keeps the sentence's numbers and adds the next one's merges two sentences ("born in 1882 and died in 1945").
    swapped_out = any(t[0].isdigit() and t not in numbers for b in best for t in b)
    elsewhere = {t for tokens in sentences if not any(tokens is b for b in best) for t in tokens}
    return not swapped_out or not any(t in elsewhere and not any(t in b for b in best) for t in numbers)


def _numbers_after_same_words(claim_clause: str, span: str) -> bool:
    """No number of the claim stands where the span, after the same two words, has another one
    ("assassination in 1970" where the span says "assassination in 1981"). The span may hold more before it
    ("from 15 October 1970" for "from 1970").
    """
    claim = canonical_words(PASSAGE_MARKER.sub(" ", claim_clause))
    text = canonical_words(PASSAGE_MARKER.sub(" ", span))
    listed = {t for j, t in enumerate(text) if j and text[j - 1] in ("and", "or")}  # "5,000 in 1900 and 12,000"
    for i, n in enumerate(claim):
        if i < 2 or not n[0].isdigit() or n in listed:
            continue
        after = [text[j + 2 : j + 5] for j in range(len(text) - 2) if text[j : j + 2] == claim[i - 2 : i]]
        if after and not any(n in words for words in after) and any(words[0][0].isdigit() for words in after):
            return False
    return True


def copied(claim: str, span: str) -> bool:
    """Is the claim a verbatim run of four words or more of the span (a title before it aside: "[1] Amazon:",
    "Amazon (company):")?
    """
    theirs = f" {' '.join(_words(span))} "
    for text in (claim, LEADING_TITLE.sub("", claim)):
        ours = _words(text)
        if len(ours) >= 4 and f" {' '.join(ours)} " in theirs:
            return True
    return False


def _words(text: str) -> list[str]:
    """The canonical words of `text` without passage numbers and titles (a title is not the passage's text)."""
    return canonical_words(PASSAGE_HEADING.sub(" ", text))


def substituted(claim: str, span: str, title: set[str] | frozenset[str] = frozenset()) -> bool:
    """Does a near copy of the span put other words where the span has a name or a word of nearly the same
    form ("is a tragicomedy written by" for "is a tragedy written by", "with her sister Isis, searched" for
    "with her sister Nephthys, searched")? Only between runs of two or more words copied on both sides.
    """
    ours = canonical_words(PASSAGE_MARKER.sub(" ", claim))
    theirs = _words(span)
    names = set(name_tokens(span))
    ops = difflib.SequenceMatcher(None, theirs, ours, autojunk=False).get_opcodes()
    for k, (op, i1, i2, j1, j2) in enumerate(ops):
        if op != "replace" or i2 - i1 > 3 or j2 - j1 > 6 or k == 0:
            continue
        before = ops[k - 1][2] - ops[k - 1][1]
        after = ops[k + 1][2] - ops[k + 1][1] if k + 1 < len(ops) else None
        # Between copied runs, or at the end of both after a longer one ("the Persian satrap Atropatene.").
        if before < 2 or (after is None and (before < 3 or i2 < len(theirs))) or (after is not None and after < 2):
            continue
        # A word of the span the claim has fewer times ("The Tragedy of ... is a tragicomedy").
        gone = [t for t in theirs[i1:i2] if ours.count(t) < theirs.count(t) and t not in STOP]
        new = [t for t in ours[j1:j2] if t not in STOP and len(t) > 1 and (after is not None or t not in theirs)]
        # The title's other name for it ("Muhammad Ali won" for "Clay won"), not a form of the same word
        # ("the satrap Atropatene" for "Atropates" under the title "Atropatene").
        alias = not any(len(os.path.commonprefix([g, t])) >= 4 for g in gone for t in new)
        if new and alias and all(t in title and t not in theirs for t in new):
            continue
        # A word the compressor cut that the claim restores ("ayarman" -> "Jayavarman") is no substitution.
        swapped = [t for t in gone if t in names or any(_near(t, n) for n in new)]
        if new and any(not any(t in n or n in t for n in new) for t in swapped):
            return True
    return False


def _near(a: str, b: str) -> bool:
    """Two different words of nearly the same form: a shared start of 4 letters, and neither is the other
    with an ending once both lose their inflection ("tragedy" / "tragicomedy", "Atropates" / "Atropatene";
    not "plays" / "played", "organised" / "organized").
    """
    a, b = stem(a), stem(b)
    n = len(os.path.commonprefix([a, b]))
    return n >= 4 and not (a.startswith(b) or b.startswith(a))


def clauses(text: str) -> list[str]:
    """The clauses of `text` that hold a content word; a clause never spans two sentences (the sentence
    splitter knows "U.S." and "Franklin D. Roosevelt").
    """
    return _split(_sentences(text))


def _sentences(text: str) -> list[str]:
    return [text[s:e] for s, e, _ in sentence_spans(text)] or [text]


def _split(sentences: list[str]) -> list[str]:
    """The clauses of these sentences that hold a content word."""
    return [c for sentence in sentences for c in _CLAUSE.split(sentence) if c and content_words(c)]
