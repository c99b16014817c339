"""What a kept unit brings along: the structure rules of the pruning selectors, read from the blocks of a
passage that `corpus.sentences.unit_spans` cut (a list item's lead-in, a table row's header, a question
heading's answer, a section's lead), and how the kept units of a passage read as text again.

A span here is (passage, text, ends its block, kind), in passage order: the units of a context, with the
block kinds the index stored (`corpus.sentences.Unit`).
"""

from __future__ import annotations

from corpus.text import LIST_ITEM

Span = tuple[int, str, bool, str]
"""One unit of a context: (passage index, text, ends its block or paragraph, kind)."""

HEADINGS = frozenset({"heading", "signature", "term"})
"""Unit kinds that title what follows them (from a document's outline)."""


def structure_units(spans: list[Span], section_lead: bool = False) -> dict[int, list[int]]:
    """Which units each unit brings along when it is kept, from the blocks (paragraphs) of its passage.

    `spans` holds (passage, text, ends its block, kind) in passage order. A list item (kind `list`, or a
    paragraph opening like one) or a code block brings the lead-in before it (the last sentence of the nearest
    paragraph before it that ends in ":"); a table row brings its table's first row; a unit after a
    question-like heading (a one-sentence paragraph of at most 15 words ending in "?", not code or a table
    row) brings the first sentence after that heading, which answers it; with `section_lead`, a heading of the
    outline (kind heading, signature or term) and every unit after it bring the section's first prose
    sentence (`section_lead_of`).
    """
    paragraphs: list[list[int]] = []
    for i, (pi, _, _, _) in enumerate(spans):
        if not paragraphs or spans[paragraphs[-1][-1]][2] or spans[paragraphs[-1][-1]][0] != pi:
            paragraphs.append([])
        paragraphs[-1].append(i)
    links: dict[int, list[int]] = {}
    lead_in: int | None = None
    answer: int | None = None
    for k, para in enumerate(paragraphs):
        (passage, first, _, kind) = spans[para[0]]
        if k and spans[paragraphs[k - 1][0]][0] != passage:
            lead_in = answer = None  # a new passage: nothing before it is its structure
        if kind in ("list", "code") or (kind == "text" and LIST_ITEM.match(first)):
            for i in para:
                if lead_in is not None:
                    links.setdefault(i, []).append(lead_in)
        elif kind == "row":
            for i in para[1:]:
                links.setdefault(i, []).append(para[0])
        else:
            last = spans[para[-1]][1].rstrip()
            lead_in = para[-1] if last.endswith(":") else None
        question = (
            kind not in ("code", "row") and len(para) == 1 and first.rstrip().endswith("?") and len(first.split()) <= 15
        )  # a code line or table row ending in "?" (an SQL placeholder) asks nothing
        if question:
            following = para[-1] + 1
            answer = following if following < len(spans) and spans[following][0] == passage else None
            continue
        if section_lead and kind in HEADINGS:
            answer = section_lead_of(spans, para[-1])
            if answer is not None:
                for i in para:
                    links.setdefault(i, []).append(answer)
            continue
        if answer is not None:
            for i in para:
                if i != answer:
                    links.setdefault(i, []).append(answer)
    return links


def section_lead_of(spans: list[Span], heading: int) -> int | None:
    """The first prose sentence (kind `text`) after unit `heading` in its passage and section: what the
    section says it is about, past an API entry's parameter list or a code block; None when the next heading
    or the passage's end comes first.
    """
    passage = spans[heading][0]
    for j in range(heading + 1, len(spans)):
        if spans[j][0] != passage or spans[j][3] in HEADINGS:
            return None
        if spans[j][3] == "text" and not LIST_ITEM.match(spans[j][1]):
            return j
    return None


def join_units(picked: list[tuple[str, str]]) -> str:
    """The kept units of one passage as text: (text, kind) pairs in passage order; a code block or table row
    stands on its own lines, sentences are joined by a space.
    """
    out = ""
    for n, (text, kind) in enumerate(picked):
        if n:
            out += "\n" if kind in ("code", "row") or picked[n - 1][1] in ("code", "row") else " "
        out += text
    return out
