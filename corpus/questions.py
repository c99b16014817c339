"""Answerable questions from any corpus, offline and rule-based: wh- and cloze questions around the dates,
numbers and names of single sentences, each with its gold answer (aliases) and gold document.

The rules (docs/questions.md lists their known biases):

- a sentence is a candidate when it has 6-45 words and names its document's subject: the title occurs in
  it, or it opens with a pronoun ("It", "He", "They", "Its") that is replaced by the title;
- parenthetical asides are dropped first (they hold conversions and dates that would give the answer away);
- year: "in 1889" -> "in which year"; full date: "on 14 July 1789" -> "on which date"; quantity:
  "6,400 km" -> "how many km"; agent: "designed by Gustave Eiffel" -> "by whom" (after a participle, else
  "by what"); any other capitalised name inside the
  sentence -> a cloze ("Fill in the blank: ... ___ ...");
- a question is kept only when its answer occurs exactly once in the document (whole words), is not part of
  the title, and no other document yields the same question text (ambiguity filters);
- at most `per_doc` questions per document; the output order is by sha256 of the question id, so the first N
  are a deterministic random sample.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from corpus.errors import CribsheetError
from corpus.models import Document, Question
from corpus.text import PRONOUNS, normalize, occurrences, sentence_spans

GENERATOR_VERSION = "rules-3"
"""Changes whenever a rule changes: generated sets name the version that made them."""

_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_YEAR = r"(?:1[0-9]{3}|20[0-9]{2})"
_PAREN = re.compile(r"\s*\([^()]*\)")
_DATE = re.compile(rf"\bon ((\d{{1,2}}) ({_MONTHS}) ({_YEAR})|({_MONTHS}) (\d{{1,2}}), ({_YEAR}))\b")
_IN_YEAR = re.compile(rf"\b(in|since|until|by|around|from) ({_YEAR})\b(?![-–/]|\s*(?:BC|BCE|AD|CE)\b)")
_UNITS = (
    "km|kilometres|kilometers|miles|mi|metres|meters|m|feet|ft|kg|tonnes|tons|years|days|hours|people|"
    "inhabitants|residents|species|members|speakers|employees|students|languages|countries|states|islands|"
    "episodes|albums|films|books|games|copies|votes|seats|soldiers|troops|casualties|deaths|stories|floors|"
    "moons|elements|atoms|bones|teeth|chapters|provinces|districts|municipalities|counties|regions|cantons"
)
_COUNT = re.compile(
    rf"(?<![\w,.$£€-])(\d{{1,3}}(?:,\d{{3}})+|\d+(?:\.\d+)?)( (?:million|billion|thousand))? ({_UNITS})\b"
)
_NAME = r"[A-Z][a-z\u00C0-\u024F'-]+"
_AGENT = re.compile(rf"\bby ((?:{_NAME}|[A-Z]\.)(?: (?:{_NAME}|[A-Z]\.|de|van|von|da|del|di|la))*(?: {_NAME}))")
_PROPER = re.compile(rf"(?<=[a-z,] )({_NAME}(?: (?:of |de |the )?{_NAME}){{0,3}})")
_PRONOUN = re.compile(rf"^({'|'.join(p.capitalize() for p in PRONOUNS)})\b")
Q = TypeVar("Q", bound=Question)
_NOT_NAMES = set(_MONTHS.split("|")) | {"The", "In", "It", "He", "She", "They", "This", "These", "A", "An"}


class GeneratedQuestion(Question):
    """A generated question: what rule made it and the sentence it came from (for review)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: str = ""
    """year | date | quantity | agent | cloze"""
    sentence: str = ""
    """The source sentence, as it reads in the document."""
    generator: str = GENERATOR_VERSION
    section: str = ""
    """Section path of the source in its document (`a › b`; empty: no sections)."""


class QuestionRules(BaseModel):
    """Knobs of the rule-based generator."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    per_doc: int = Field(default=2, ge=1)
    """Questions kept per document at most (spreads the set over the corpus)."""
    min_words: int = Field(default=6, ge=3)
    max_words: int = Field(default=45, ge=6)


def _subject(doc: Document) -> str:
    return re.sub(r"\s*\(.*\)$", "", doc.title or "").strip()


def _grounded(sentence: str, subject: str) -> str | None:
    """The sentence with an opening pronoun replaced by the subject; None when it never names the subject."""
    if not subject:
        return None
    m = _PRONOUN.match(sentence)
    if m and sentence[m.end() : m.end() + 1] in ("'", "\u2019"):
        m = None  # "It'd be a hassle": the title cannot stand in a contraction (tuning: "Django'd be")
    if m:
        possessive = m.group(1) in ("Its", "His", "Her", "Their")
        return (f"{subject}'s" if possessive else subject) + sentence[m.end() :]
    return sentence if occurrences(sentence, subject) else None


def _ask(before: str, wh: str, after: str) -> str:
    """A question from the sentence around the answer: "<before> <wh> <after>?"."""
    text = f"{before.rstrip()} {wh} {after.lstrip()}".strip()
    text = re.sub(r"\s+([,;:])", r"\1", text).rstrip(" .;:,")
    return text[0].upper() + text[1:] + "?"


def _candidates(sentence: str) -> Iterator[tuple[str, str, list[str]]]:
    """(kind, question, answer aliases) for every rule that fires on `sentence`."""
    for m in _DATE.finditer(sentence):
        day, month, year = (m.group(2), m.group(3), m.group(4)) if m.group(2) else (m.group(6), m.group(5), m.group(7))
        dates = [f"{int(day)} {month} {year}", f"{month} {int(day)}, {year}"]
        yield "date", _ask(sentence[: m.start()], "on which date", sentence[m.end() :]), dates
    for m in _IN_YEAR.finditer(sentence):
        if _DATE.search(sentence[max(0, m.start() - 20) : m.end()]):
            continue
        before, after = sentence[: m.start()], sentence[m.end() :]
        if not before.strip() and after.startswith(","):  # "In 1889, X did Y." -> "X did Y in which year?"
            rest = after[1:].strip().rstrip(".")
            yield "year", _ask(rest, f"{m.group(1).lower()} which year", ""), [m.group(2)]
        else:
            yield "year", _ask(before, f"{m.group(1)} which year", after), [m.group(2)]
    for m in _COUNT.finditer(sentence):
        number, scale, unit = m.group(1), m.group(2) or "", m.group(3)
        if re.fullmatch(_YEAR, number) and not scale:
            continue
        aliases = [number + scale]
        if "," in number and not scale:
            aliases.append(number.replace(",", ""))
        yield "quantity", _ask(sentence[: m.start()], f"how many {unit}", sentence[m.end() :]), aliases
    for m in _AGENT.finditer(sentence):
        if m.group(1).split()[0] in _NOT_NAMES:
            continue
        last = (sentence[: m.start()].split() or [""])[-1]
        wh = "by whom" if re.search(r"(ed|en|wn|ilt|ade)$", last) else "by what"  # "written by" vs "east by"
        yield "agent", _ask(sentence[: m.start()], wh, sentence[m.end() :]), [m.group(1)]
    for m in _PROPER.finditer(sentence):
        name = m.group(1)
        words = sentence[: m.start()].split()
        if name.split()[0] in _NOT_NAMES or not words or words[-1] == "by":
            continue
        if words[-1][0].isupper() or sentence[m.end() : m.end() + 2].strip()[:1] in ('"', "'"):
            continue  # part of a longer name ("Helene ___ Riefenstahl", '___ "Leni"')
        if sentence[m.end() : m.end() + 1].isalnum() or sentence[m.end() : m.end() + 1] in ("'", "’", "_"):
            continue  # the name is the start of a longer word: a blank never cuts a word ("___SSL's")
        cloze = sentence[: m.start()] + "___" + sentence[m.end() :]
        yield "cloze", "Fill in the blank: " + cloze.rstrip(" ."), [name]


def _sentences(doc: Document) -> Iterator[str]:
    """The document's sentences; in a parsed file only those of its prose blocks, so a heading without a
    full stop is never glued to the sentence after it ("bz2 --- Support for ... was ___").
    """
    blocks = [(s, e) for s, e, kind in doc.outline if kind in ("text", "list")] if doc.outline else [(0, len(doc.text))]
    for b_start, b_end in blocks:
        block = doc.text[b_start:b_end]
        for start, end, _ in sentence_spans(block):
            yield block[start:end].strip()


def _doc_questions(doc: Document, rules: QuestionRules) -> Iterator[GeneratedQuestion]:
    subject = _subject(doc)
    for original in _sentences(doc):
        sentence = _grounded(_PAREN.sub("", original), subject)
        if sentence is None or not rules.min_words <= len(sentence.split()) <= rules.max_words:
            continue
        for kind, question, aliases in _candidates(sentence):
            answer = aliases[0]
            if occurrences(doc.text, answer) != 1 or occurrences(subject, answer) or occurrences(question, answer):
                continue  # ambiguous in the document, part of the subject, or given away
            if not rules.min_words <= len(question.split()) <= rules.max_words + 4:
                continue
            qid = "gen-" + hashlib.sha256(f"{doc.id}\x1f{kind}\x1f{question}".encode()).hexdigest()[:16]
            yield GeneratedQuestion(
                id=qid,
                question=question,
                answers=aliases,
                gold_doc_ids=[doc.id],
                answerable=True,
                kind=kind,
                sentence=original,
            )


def spread_by_kind(found: Iterable[GeneratedQuestion], per_doc: int) -> list[GeneratedQuestion]:
    """At most `per_doc` of one document's questions, one of each kind before a second (each kind in id order)."""
    by_kind: dict[str, list[GeneratedQuestion]] = {}
    for q in sorted(found, key=lambda q: q.id):
        by_kind.setdefault(q.kind, []).append(q)
    picked: list[GeneratedQuestion] = []
    while len(picked) < per_doc and any(by_kind.values()):
        for kind in sorted(by_kind):
            if by_kind[kind] and len(picked) < per_doc:
                picked.append(by_kind[kind].pop(0))
    return picked


def document_questions(doc: Document, rules: QuestionRules | None = None) -> list[GeneratedQuestion]:
    """The questions the rules keep from one document, before the corpus-wide ambiguity filter
    (`unambiguous`): a caller streaming a corpus holds these, never the documents.
    """
    rules = rules or QuestionRules()
    return spread_by_kind(_doc_questions(doc, rules), rules.per_doc)


def unambiguous(kept: Iterable[GeneratedQuestion]) -> list[GeneratedQuestion]:
    """The questions no other document also yields (by normalised text), ordered by sha256 of the id."""
    kept = list(kept)
    texts = Counter(normalize(q.question) for q in kept)
    unique = {q.id: q for q in kept if texts[normalize(q.question)] == 1}  # same text from two docs: ambiguous
    return sorted(unique.values(), key=lambda q: hashlib.sha256(q.id.encode()).hexdigest())


def generate_questions(docs: Iterable[Document], rules: QuestionRules | None = None) -> list[GeneratedQuestion]:
    """Every question the rules keep over `docs`, ordered by sha256 of the id (a deterministic shuffle); the
    documents are streamed, one at a time.
    """
    return unambiguous(q for doc in docs for q in document_questions(doc, rules))


def take(questions: Sequence[Q], n: int | None, source: str) -> list[Q]:
    """The first `n` questions; fails in one line when the corpus cannot supply them (or any)."""
    if not questions:
        raise CribsheetError(
            f"{source}: no question could be generated (no sentence names its document's title together with a "
            "date, number or name)"
        )
    if n is not None and n > len(questions):
        raise CribsheetError(f"{source}: the corpus supports {len(questions)} questions; {n} were asked for")
    return list(questions[:n] if n is not None else questions)


class LLMQuestionConfig(BaseModel):
    """An OpenAI-compatible chat model that writes the questions instead of the rules."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str
    model: str
    api_key: str = "EMPTY"
    timeout_s: float = Field(default=60.0, gt=0)


_LLM_PROMPT = (
    "Write one factual question that the passage below answers, and its answer: a short phrase copied word for "
    "word from the passage. The question must make sense without the passage (name its subject) and must not "
    'contain the answer. Reply with JSON only: {{"question": "...", "answer": "..."}}\n\nTitle: {title}\n'
    "Passage: {text}"
)


def llm_questions(docs: Iterable[Document], config: LLMQuestionConfig, n: int, client: object = None) -> list[Question]:
    """Up to `n` questions written by the configured model, one per document in sha256 order of the id; a
    reply is kept only when its answer occurs exactly once in the document and not in the question.

    `client` is an `openai.OpenAI`-like object (tests pass a fake); by default one is built from `config`.
    """
    import json

    if client is None:
        from openai import OpenAI

        client = OpenAI(base_url=config.base_url, api_key=config.api_key, timeout=config.timeout_s)
    ordered = sorted(docs, key=lambda d: hashlib.sha256(d.id.encode()).hexdigest())
    out: list[Question] = []
    seen: set[str] = set()
    for doc in ordered:
        if len(out) >= n:
            break
        reply = client.chat.completions.create(  # type: ignore[attr-defined]
            model=config.model,
            messages=[{"role": "user", "content": _LLM_PROMPT.format(title=doc.title, text=doc.text[:4000])}],
            temperature=0.0,
        )
        raw = (reply.choices[0].message.content or "").strip()
        try:
            item = json.loads(raw[raw.find("{") : raw.rfind("}") + 1])
            question, answer = str(item["question"]).strip(), str(item["answer"]).strip()
        except (ValueError, KeyError, TypeError):
            continue  # not the JSON asked for: skip the document, never guess
        key = normalize(question)
        if not question or occurrences(doc.text, answer) != 1 or occurrences(question, answer) or key in seen:
            continue
        seen.add(key)
        qid = "llm-" + hashlib.sha256(f"{doc.id}\x1f{question}".encode()).hexdigest()[:16]
        out.append(Question(id=qid, question=question, answers=[answer], gold_doc_ids=[doc.id], answerable=True))
    return out


def shared_questions(questions: Sequence[Question], others: Iterable[Question]) -> list[Question]:
    """The questions of `questions` that are also questions of `others` by content: the normalised text (case,
    punctuation, articles and spacing folded), whatever the files holding them are called.
    """
    taken = {normalize(q.question) for q in others}
    return [q for q in questions if normalize(q.question) in taken]
