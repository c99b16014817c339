"""Cited structured answers (lever 5): the JSON schema the engine is held to, its parsing, and how well the
citations point at the gold documents.

Citation precision: cited passages whose document is a gold document / cited passages. Citation recall:
gold documents cited / gold documents present in the context (what could have been cited). Both are NULL
when undefined (no valid citations; no gold document in the context).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from eval.run.draft import CitationPart

CITED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "maxLength": 80},
        "citations": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 99}, "maxItems": 8},
    },
    "required": ["answer", "citations"],
    "additionalProperties": False,
}
"""`{answer, citations: [passage numbers]}`: at most 80 characters of answer and 8 citations, so the longest
valid object fits the engine's `SCHEMA_MAX_TOKENS` (no whitespace between tokens: the engine's
`disable_any_whitespace`, set on the engine)."""


def cited_schema(n_passages: int | None) -> dict[str, Any]:
    """CITED_SCHEMA with its citations held to passages 1..n_passages of the prompt (none when it has no
    passage; only the shape when the count is unknown), so the engine cannot cite a passage the prompt lacks.
    """
    if n_passages is None:
        return copy.deepcopy(CITED_SCHEMA)
    bound = {"maxItems": 0} if n_passages < 1 else {"items": {"type": "integer", "minimum": 1, "maximum": n_passages}}
    cites = {**CITED_SCHEMA["properties"]["citations"], **bound}
    return {**CITED_SCHEMA, "properties": {**CITED_SCHEMA["properties"], "citations": cites}}


CITED_INSTRUCTION = (
    'Reply with JSON only: {"answer": "<the shortest answer, or I don\'t know>", '
    '"citations": [<numbers of the passages that state it>]}.'
)
"""Appended after the question (the stable prefix stays shared with text settings)."""


def parse_cited(text: str) -> tuple[str | None, list[int] | None]:
    """The answer and the cited passage numbers, or (None, None) when `text` does not follow the schema."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None, None
    if not isinstance(value, dict) or set(value) != {"answer", "citations"}:
        return None, None
    answer, cites = value["answer"], value["citations"]
    if not isinstance(answer, str) or not isinstance(cites, list):
        return None, None
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in cites):
        return None, None
    return answer, cites


def score_citations(
    cites: Sequence[int], passage_docs: Sequence[str | None], gold_doc_ids: Sequence[str]
) -> CitationPart:
    """The citation columns of a parsed list of passage numbers against the question's gold documents.

    `passage_docs` has one entry per passage of the prompt; None where the compressor did not say which
    input passage a text came from: such a citation is valid, but cannot count for or against precision.
    """
    in_range = [c for c in dict.fromkeys(cites) if c <= len(passage_docs)]
    cited_docs = [passage_docs[c - 1] for c in in_range]
    gold = set(gold_doc_ids)
    present = gold & {d for d in passage_docs if d is not None}
    traced = None not in cited_docs
    precision = sum(d in gold for d in cited_docs) / len(in_range) if in_range and gold and traced else None
    recall = len(present & {d for d in cited_docs if d}) / len(present) if present else None
    return CitationPart(
        schema_valid=all(c <= len(passage_docs) for c in cites),  # a repeated citation is still valid
        citations=json.dumps(list(cites)),
        citation_precision=precision,
        citation_recall=recall,
    )


def citation_part(
    text: str, passage_docs: Sequence[str | None], gold_doc_ids: Sequence[str]
) -> tuple[str, CitationPart]:
    """The answer to score (the JSON's answer, or the raw text when invalid) and the citation columns."""
    answer, cites = parse_cited(text)
    if answer is None or cites is None:
        return text, CitationPart(schema_valid=False)
    return answer, score_citations(cites, passage_docs, gold_doc_ids)
