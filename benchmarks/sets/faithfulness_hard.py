"""A hard labelled faithfulness set built from a corpus (docs/faithfulness.md): faithful rewrites a lexical
checker may reject, and unfaithful edits that keep almost every word of the context. Each document gives a
context ("[1] Title: lead" plus an unrelated passage) and up to one case per kind. Faithful: verbatim,
merge (two sentences joined), reorder, passive ("X was designed by Y" -> "Y designed X"), demonym ("a French
painter" -> "a painter from France"), number_format. Unfaithful: negation_added, negation_removed,
entity_swap and number_swap (from the same context), role_swap (two names of a sentence exchanged),
attribute (largest -> smallest), outside_fact (a sentence of a related document), wrong_candidate (another
name of the same sentence in the clause: "Italian is the official language of Monaco"). Split: `tune` when
the first hex digit of sha256(id + split) is below 8, else `test`; thresholds may be chosen on `tune` only.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.sets.faithfulness_cases import LabelledCase, _h
from corpus.models import Document
from corpus.text import DEMONYMS as PLACES
from corpus.text import sentence_spans

FAITHFUL = ("verbatim", "merge", "reorder", "passive", "demonym", "number_format")
UNFAITHFUL = (
    "negation_added",
    "negation_removed",
    "entity_swap",
    "number_swap",
    "role_swap",
    "attribute",
    "outside_fact",
    "wrong_candidate",
)

_WITH_THE = ("united states", "netherlands", "czech republic")
DEMONYMS = {
    demonym.capitalize(): ("the " if place in _WITH_THE else "") + place.title()
    for demonym, place in list(PLACES.items())[:40]
}
"""Demonym -> country (a faithful rewrite swaps one form for the other): the first 40 of the toolkit's table,
the ones the frozen set was built with."""

_PAIRS = (
    "largest smallest highest lowest longest shortest oldest youngest first last northern southern eastern western "
    "north south east west early late ancient modern major minor most least larger smaller higher lower older "
    "younger upper lower increase decrease public private male female inner outer maximum minimum"
).split()
OPPOSITES = {**dict(zip(_PAIRS[::2], _PAIRS[1::2], strict=True)), **dict(zip(_PAIRS[1::2], _PAIRS[::2], strict=True))}
"""An attribute word and a replacement that changes the claim's meaning."""

_NAME = re.compile(r"(?<=[a-z,;] )[A-Z][a-z\u00C0-\u024F]{2,}(?: [A-Z][a-z\u00C0-\u024F]{2,})*")
_NUMBER = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?![\w,])|(?<![\w.,])\d{2,4}(?![\w,])")
_BE = re.compile(r"\b(is|was|are|were|has been|have been|can|will)\b")
_NEG = re.compile(r"\b(not|never)\s|n't\b")  # the negations a sentence stays grammatical without (corpus.text has all)
_PASSIVE = re.compile(
    r"^(?P<x>[A-Z][^,]*?) (?:was|were) (?:\w+ly )?(?P<v>\w+(?:ed|en|wn|lt|ght)) by "
    r"(?P<y>(?:[A-Z]\.|[A-Z][\w'-]+)(?: (?:[A-Z]\.|[A-Z][\w'-]+))*)(?P<rest>(?: in \d{4})?)[.,]"
)
_PAST = dict(
    pair.split(":")
    for pair in "written:wrote given:gave taken:took shown:showed known:knew drawn:drew grown:grew thrown:threw "
    "chosen:chose spoken:spoke broken:broke driven:drove beaten:beat stolen:stole".split()
)
_OBJECT = {"He": "him", "She": "her", "They": "them", "It": "it", "We": "us"}
_UNITS = {"kilometres": "km", "kilometers": "km", "metres": "m", "meters": "m", "kilograms": "kg", "miles": "mi"}


class HardCase(LabelledCase):
    """A claim, its context, the kind of rewrite and whether the context supports it."""

    id: str
    doc_id: str
    split: str
    """tune | test"""


def _sentences(doc: Document) -> list[str]:
    return [doc.text[s:e].strip() for s, e, _ in sentence_spans(doc.text) if 6 <= len(doc.text[s:e].split()) <= 45]


def _pick(options: Sequence[str], seed: str) -> str | None:
    return options[int(_h(seed), 16) % len(options)] if options else None


_NOT_NAMES = set(
    "The This These That Those Its His Her Their There They Although Though While Whereas Some Many Most Other "
    "Both Each However After Before During Since With From For And But When Which Who What Where Also Such".split()
)


def _names(text: str, subject: str, demonyms: bool = False, at_start: bool = False) -> list[str]:
    """Capitalised names in `text` (function words stripped), except the subject's (and demonyms unless
    asked for: a language or nationality is a candidate answer, not a swap that keeps the sentence true).
    """
    found = []
    for raw in _NAME.findall("x " + text if at_start else text):
        words = raw.split()
        while words and words[0] in _NOT_NAMES:
            words.pop(0)
        name = " ".join(words)
        if name and name not in subject and (demonyms or name not in DEMONYMS):
            found.append(name)
    return list(dict.fromkeys(found))


def _lower_first(text: str) -> str:
    first = text.split()[0]
    return text[0].lower() + text[1:] if first in _NOT_NAMES or first in ("A", "An", "In", "It") else text


def _swap(text: str, old: str, new: str) -> str:
    return re.sub(rf"(?<![\w-]){re.escape(old)}(?![\w-])", new, text, count=1)


def _first(sentences: Sequence[str], make: Callable[[str], str | None]) -> str | None:
    for sentence in sentences:
        out = make(sentence)
        if out and out != sentence:
            return out
    return None


def _faithful(doc: Document, sents: list[str]) -> Iterator[tuple[str, str | None]]:
    yield "verbatim", _pick(sents, doc.id + "v")
    pairs = [(a, b) for a, b in zip(sents, sents[1:], strict=False) if len((a + b).split()) <= 50]
    pair = pairs[int(_h(doc.id + "m"), 16) % len(pairs)] if pairs else None
    yield "merge", f"{pair[0].rstrip('.')}, and {_lower_first(pair[1])}" if pair else None

    def reorder(s: str) -> str | None:
        m = re.match(r"^(In|By|Since|During|After|Before) ([^,]*\d[^,]*), (.+)\.$", s)
        if m:
            rest = m.group(3)
            return f"{rest[0].upper()}{rest[1:]} {m.group(1).lower()} {m.group(2)}."
        m = re.match(r"^(.{15,}?), but ((?:it|they|he|she|this|these|its|the) .{15,})\.$", s)
        return f"{m.group(2)[0].upper()}{m.group(2)[1:]}, but {_lower_first(m.group(1))}." if m else None

    yield "reorder", _first(sents, reorder)

    def passive(s: str) -> str | None:
        m = _PASSIVE.match(s)
        if not m:
            return None
        if re.search(r"\b(?:that|which|who|whom)\b", m.group("x")):
            return None  # "Tradition held that all of his laws were repealed by Solon": not the subject
        x = _OBJECT.get(m.group("x"), _lower_first(m.group("x")))  # "He was sired by X" -> "X sired him"
        verb = _PAST.get(m.group("v"), m.group("v"))  # "written by X" -> "X wrote"
        return f"{m.group('y')} {verb} {x}{m.group('rest')}."

    yield "passive", _first(sents, passive)

    def demonym(s: str) -> str | None:
        m = re.search(rf"\b(a|an) ({'|'.join(DEMONYMS)}) ([a-z]+)\b", s)
        return s[: m.start()] + f"a {m.group(3)} from {DEMONYMS[m.group(2)]}" + s[m.end() :] if m else None

    yield "demonym", _first(sents, demonym)

    def number_format(s: str) -> str | None:
        m = re.search(r"\b(\d{1,3}(?:,\d{3})+)\b", s)
        if m:
            return s[: m.start()] + m.group(1).replace(",", "") + s[m.end() :]
        m = re.search(rf"\b(\d+) ({'|'.join(_UNITS)})\b", s)
        return s[: m.start()] + f"{m.group(1)} {_UNITS[m.group(2)]}" + s[m.end() :] if m else None

    yield "number_format", _first(sents, number_format)


def _unfaithful(doc: Document, sents: list[str], related: Document | None) -> Iterator[tuple[str, str | None]]:
    subject = doc.title

    def negate(s: str) -> str | None:
        if _NEG.search(s):
            return None
        m = _BE.search(s)
        return s[: m.end()] + " not" + s[m.end() :] if m else None

    yield "negation_added", _first(sents, negate)

    def unnegate(s: str) -> str | None:
        m = _NEG.search(s)
        return (s[: m.start()] + s[m.end() :]).replace("  ", " ") if m and "n't" not in m.group() else None

    yield "negation_removed", _first(sents, unnegate)
    context_names = _names(doc.text, subject)

    def entity_swap(s: str) -> str | None:
        here = _names(s, subject)
        others = [n for n in context_names if n not in s]
        return _swap(s, here[0], others[0]) if here and others else None

    yield "entity_swap", _first(sents, entity_swap)
    numbers = list(dict.fromkeys(_NUMBER.findall(doc.text)))

    def number_swap(s: str) -> str | None:
        here = _NUMBER.findall(s)
        others = [n for n in numbers if n not in s and len(n) == len(here[0])] if here else []
        return re.sub(rf"(?<![\w,.]){re.escape(here[0])}(?![\w,])", others[0], s, count=1) if others else None

    yield "number_swap", _first(sents, number_swap)

    def role_swap(s: str) -> str | None:
        here = _names(s, subject)
        if len(here) < 2 or here[0] in here[1] or here[1] in here[0]:
            return None
        a, b = here[0], here[1]
        between = s[s.find(a) + len(a) : s.find(b)]
        if len(between.split()) < 3 or "," in between or " and " in f" {between} " or s.find(a) > s.find(b):
            return None  # names in a list: exchanging them changes nothing
        return _swap(_swap(_swap(s, a, "\x00"), b, a), "\x00", b)

    yield "role_swap", _first(sents, role_swap)

    def attribute(s: str) -> str | None:
        m = re.search(rf"\b({'|'.join(OPPOSITES)})\b", s)
        return s[: m.start()] + OPPOSITES[m.group(1)] + s[m.end() :] if m else None

    yield "attribute", _first(sents, attribute)
    outside = _sentences(related) if related else []
    yield "outside_fact", next((s for s in outside if s not in doc.text), None)

    def wrong_candidate(s: str) -> str | None:
        clauses = [c.strip() for c in re.split(r"[,;]| while | whereas | but ", s.rstrip(".")) if c.strip()]
        for i, clause in enumerate(clauses):
            clause = re.sub(r"^(?:Although|Though|While|Whereas|Whilst) ", "", clause)
            mine = _names(clause, subject, demonyms=True, at_start=True)
            others = clauses[:i] + clauses[i + 1 :]
            rivals = [n for c in others for n in _names(c, subject, demonyms=True, at_start=True) if n not in clause]
            if mine and rivals and len(clause.split()) >= 4 and _BE.search(clause) and clause[0].isupper():
                claim = _swap(clause, mine[0], rivals[0])
                return claim + "."
        return None

    yield "wrong_candidate", _first(sents, wrong_candidate)


def build_hard_cases(docs: Sequence[Document], n_docs: int = 200, more_passive: int = 0) -> list[HardCase]:
    """Up to 14 cases per document for the first `n_docs` usable documents (sha256 order of the id), then
    passive cases alone from the documents after them, up to `more_passive` (passive sentences are rare).
    """
    pool = sorted((d for d in docs if len(_sentences(d)) >= 3 and d.title), key=lambda d: _h(d.id))
    by_title = {d.title: d for d in docs}
    cases: list[HardCase] = []
    extra = 0
    for i, doc in enumerate(pool):
        if i >= n_docs and extra >= more_passive:
            break
        sents = _sentences(doc)
        distractor = pool[(i + len(pool) // 2) % len(pool)]
        context = f"[1] {doc.title}: {doc.text}\n\n[2] {distractor.title}: {distractor.text}"
        # A related document: one this lead names (a true fact near the topic), else the next in the pool.
        named = [by_title[n] for n in _names(doc.text, doc.title) if n in by_title and n != distractor.title]
        related = named[0] if named else pool[(i + 1) % len(pool)]
        split = "tune" if int(_h(doc.id + "\x1fsplit")[0], 16) < 8 else "test"
        groups = ((True, _faithful(doc, sents)), (False, _unfaithful(doc, sents, related)))
        for faithful, kinds in groups if i < n_docs else groups[:1]:
            for kind, answer in kinds:
                if i >= n_docs and (kind != "passive" or not answer):
                    continue
                extra += i >= n_docs
                if answer and (faithful or answer.strip() not in context):
                    fields: dict[str, Any] = {"doc_id": doc.id, "split": split, "kind": kind, "faithful": faithful}
                    cases.append(HardCase(id=_h(f"{doc.id}\x1f{kind}")[:16], answer=answer, context=context, **fields))
    return cases


def write_hard_set(docs: Sequence[Document], path: Path, n_docs: int = 400, more_passive: int = 40) -> dict[str, int]:
    """Freeze the hard set as JSON (contexts stored once, cases refer to them by document id); returns
    counts per kind.
    """
    import json

    cases = build_hard_cases(docs, n_docs, more_passive)
    contexts = {c.doc_id: c.context for c in cases}
    payload = {
        "method": "benchmarks/sets/faithfulness_hard.py over the bundled corpus (docs/faithfulness.md)",
        "contexts": contexts,
        "cases": [c.model_dump(exclude={"context"}) for c in cases],
    }
    path.write_text(json.dumps(payload, ensure_ascii=False, indent=0, sort_keys=True) + "\n")
    return dict(Counter(c.kind for c in cases))


def read_hard_set(path: Path) -> list[HardCase]:
    """The frozen hard set."""
    import json

    payload = json.loads(path.read_text())
    return [HardCase(context=payload["contexts"][c["doc_id"]], **c) for c in payload["cases"]]
