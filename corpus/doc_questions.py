"""Questions from the structure of documentation trees: what the extractors already see.

Documentation carries its questions in its layout, not in sentences that name a title and a date:

- **faq**: a heading that is a question ("How do I cite Django?") with the text under it;
- **definition**: a glossary or definition-list term ("view") with its definition;
- **api**: an API definition (reStructuredText `.. function::`/`.. method::` signatures, a Markdown heading
  such as "filehandle.chmod(mode)" or "Class: FileHandle") with the first sentence of its description;
- **section**: a section title with its lead paragraph.

Each question keeps its kind, its gold document and its section path. The reference answer is the first
sentence of the text that answers it (two when the first is very short: "No."), so answer token recall
credits an answer for its content words. A question is dropped when it quotes its answer (the reference
adds fewer than 3 content words to it), when its answer text is too thin (under 3 content words), or when
another document yields the same question (ambiguous). Prose without such structure falls back to the
sentence rules of `corpus.questions`.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator

from corpus.extract.base import SECTION_SEPARATOR
from corpus.models import Document
from corpus.questions import GeneratedQuestion, QuestionRules, document_questions, spread_by_kind, unambiguous
from corpus.text import LIST_ITEM, content_words, normalize, sentence_spans, stem

STRUCTURE_VERSION = "structure-3"
"""Changes whenever a structure rule changes: generated sets name the version that made them."""

_API_CALL = re.compile(r"^(?:`)?((?:new\s+)?[A-Za-z_$][\w$.]*(?:\[[^\]]*\])?)\s*\(")
_CLASS = re.compile(r"^(?:Class|Interface|Module|Namespace)\s*:\s*`?([\w$.<>]+)`?$")
_EVENT = re.compile(r"^Event\s*:\s*'([^']+)'$")
_IDENT = re.compile(r"^[A-Za-z_][\w.]*$")
_MIN_CONTENT = 3
_ADMONITION = re.compile(
    r"^(?:Availability|Note|Notes|Warning|Hint|Tip|Important|Caution|Attention|Danger|See also|Seealso"
    r"|Deprecated since[^:]*|New in[^:]*|Changed in[^:]*)\s*:\s",
    re.IGNORECASE,
)
"""A block that is an admonition or a version/availability label, not the entry's answer (tuning cases:
"Availability: MySQL, PostGIS, ..." under GeoHash(), "Note: These expressions are defined in ..." under a
section): the next block answers instead."""
_LEAD_IN = re.compile(r"\b(?:the following|as follows)\b[^.]*\.?$", re.IGNORECASE)
"""A lead-in to a list or table that ends in a full stop ("... have the following additional options.")."""
_POINTER = re.compile(r"^(?:For (?:full|more|further) (?:details|information)\b[^,]*,\s*)?see\s", re.IGNORECASE)
"""A reference that only points elsewhere ("For full details on testing, see Testing in Django.")."""
_FIELD_TERM = re.compile(r"^(?:param|type|returns?|rtype|raises?|var|ivar|cvar|keyword|kwarg|arg|argument)\b", re.I)
"""A Sphinx field-list entry read as a term ("param geo_input"): markup, not a term a user asks about."""
_DEICTIC = re.compile(r"\b(?:this|these)\s+[a-z]", re.IGNORECASE)
"""An FAQ heading that points at its page ("Who's this tutorial for?", "Where should this code live?")."""


def _first_sentences(text: str) -> str:
    """The first sentence of `text`, with the next one when the first has under 4 words ("No.")."""
    spans = sentence_spans(text)
    if not spans:
        return text.strip()
    first = text[spans[0][0] : spans[0][1]].strip()
    if len(first.split()) < 4 and len(spans) > 1:
        first = text[spans[0][0] : spans[1][1]].strip()
    return " ".join(first.split())


def _question(block: str, kind: str, title: str, section: list[str]) -> str | None:
    """The question a structural block asks, or None when it asks none."""
    text = " ".join(block.split()).strip("`").rstrip(":")
    if not text or len(text) > 160:
        return None
    if kind == "heading" and text.endswith("?") and len(text.split()) >= 4:
        return f'{text} (from "{title}")' if _DEICTIC.search(text) and title else text
    if kind == "term":
        if len(text.split()) > 6 or text.endswith((".", "?")) or _FIELD_TERM.match(text):
            return None
        return f'What does "{text}" mean in "{title}"?'
    api = _API_CALL.match(text)
    if api and kind in ("signature", "heading"):
        name = api.group(1).replace("new ", "").strip()
        return f"What does {name}() do, according to {title}?"
    if kind == "signature" and _IDENT.match(text):
        return f"What is {text}, according to {title}?"
    if kind == "heading":
        cls = _CLASS.match(text)
        if cls:
            return f"What is {cls.group(1)}?"
        event = _EVENT.match(text)
        if event:
            owner = section[-2] if len(section) >= 2 else title
            owner = _CLASS.sub(r"\1", owner).strip("`")
            call = _API_CALL.match(owner)
            owner = call.group(1).replace("new ", "").strip() if call else owner
            return f"When is the '{event.group(1)}' event of {owner} emitted?"
        words = text.split()
        if 2 <= len(words) <= 8 and not any(ch in text for ch in "(){}[]<>=`|/\\") and text != title:
            return f'What does the section "{text}" of "{title}" explain?'
    return None


def _answer_text(doc: Document, index: int, blocks: int = 1) -> tuple[int, str] | None:
    """The first `blocks` text blocks after outline entry `index` that still belong to it (before the next
    heading, term or signature), skipping parameter lists, code and admonitions; joined by a blank line.
    """
    found: list[tuple[int, str]] = []
    for start, end, kind in doc.outline[index + 1 : index + 8]:
        if kind in ("heading", "term", "signature") or len(found) == blocks:
            break
        if kind == "text" and not _ADMONITION.match(doc.text[start:end].lstrip()):
            found.append((start, doc.text[start:end]))
    return (found[0][0], "\n\n".join(t for _, t in found)) if found else None


def _section_answer(text: str, heading: str) -> str:
    """A section's answer: its first two sentences, and when neither touches the heading's subject, the first
    later sentence that does. The first alone is often only the premise ("The default serialization
    strategy is ...", "Establishing an SMTP connection is expensive."); the point follows. Not the pruned
    selector's section lead (`corpus.units.section_lead_of`: one prose sentence, kept beside the heading).
    """
    spans = sentence_spans(text)
    if len(spans) < 2:
        return _first_sentences(text)
    sentences = [" ".join(text[a:b].split()) for a, b, _ in spans[:6]]
    subject = {stem(w) for w in content_words(heading)}
    lead = sentences[:2]
    if subject and not any(subject & {stem(w) for w in content_words(s)} for s in lead):
        lead += [s for s in sentences[2:] if subject & {stem(w) for w in content_words(s)}][:1]
    return " ".join(lead)


def _doc_questions(doc: Document) -> Iterator[GeneratedQuestion]:
    title = doc.title.strip()
    for i, (start, end, kind) in enumerate(doc.outline):
        if kind not in ("heading", "term", "signature"):
            continue
        section = [p for p in doc.section_at(start).split(SECTION_SEPARATOR) if p]
        question = _question(doc.text[start:end], kind, title, section)
        is_section = question is not None and question.startswith("What does the section")
        found = _answer_text(doc, i, 3 if is_section else 1) if question else None
        if question is None or found is None:
            continue
        first = _first_sentences(found[1])
        if first.endswith(":"):
            continue  # the answer is the list or code that follows
        reference = _section_answer(found[1], doc.text[start:end]) if is_section else first
        if reference.endswith(":") or _LEAD_IN.search(reference) or len(reference.split()) < 5:
            continue  # the answer is the list or code that follows, or a label ("Type: End-of-Life")
        if LIST_ITEM.match(reference) or _POINTER.match(reference):
            continue  # one item of a list, not a lead; or only a pointer elsewhere
        added = set(content_words(reference)) - set(content_words(question))
        if len(set(content_words(reference))) < _MIN_CONTENT or len(added) < _MIN_CONTENT:
            continue  # too thin to score, or the question quotes its answer
        label = (
            "faq"
            if question.startswith(" ".join(doc.text[start:end].split()))
            else "definition"
            if kind == "term"
            else "section"
            if question.startswith("What does the section")
            else "api"
        )
        qid = "doc-" + hashlib.sha256(f"{doc.id}\x1f{label}\x1f{question}".encode()).hexdigest()[:16]
        yield GeneratedQuestion(
            id=qid,
            question=question,
            answers=[reference],
            gold_doc_ids=[doc.id],
            answerable=True,
            kind=label,
            sentence=reference,
            section=SECTION_SEPARATOR.join(section),
            generator=STRUCTURE_VERSION,
        )


def structured_questions(
    docs: Iterable[Document], per_doc: int = 12, rules: QuestionRules | None = None
) -> list[GeneratedQuestion]:
    """Questions from the documents' structure (at most `per_doc` each, one of each kind before a second),
    then the sentence rules for what structure does not cover; ordered by sha256 of the id. One pass over
    `docs`: each document is read once and let go, only the questions are held.
    """
    kept: list[GeneratedQuestion] = []
    sentences: list[GeneratedQuestion] = []
    for doc in docs:
        kept += spread_by_kind(_doc_questions(doc), per_doc)
        sentences += document_questions(doc, rules)
    texts = Counter(normalize(q.question) for q in kept)
    unique = [q for q in kept if texts[normalize(q.question)] == 1]  # the same question from two documents
    seen = {normalize(q.question) for q in unique}
    prose = [q for q in unambiguous(sentences) if normalize(q.question) not in seen]
    return sorted([*unique, *prose], key=lambda q: hashlib.sha256(q.id.encode()).hexdigest())
