"""Question pairs for the answer cache: paraphrases of one fact, near misses that must not hit."""

from __future__ import annotations

from corpus.models import Document
from corpus.question_pairs import question_pairs

DOCS = [
    Document(
        id="Eiffel Tower",
        title="Eiffel Tower",
        text="The Eiffel Tower is a wrought-iron lattice tower in Paris. "
        "The Eiffel Tower was completed in 1889 and is 330 metres tall.",
    ),
    Document(
        id="Big Ben",
        title="Big Ben",
        text="Big Ben is the nickname for the Great Bell of the clock in London. Big Ben was completed in 1859.",
    ),
]


def test_pairs_cover_paraphrases_and_both_kinds_of_near_miss() -> None:
    pairs = question_pairs(DOCS)
    by_kind = {p.kind: p for p in pairs}
    para = by_kind["paraphrase"]
    assert para.should_hit and para.answers_a == para.answers_b
    assert para.b.startswith("Fill in the blank:") and "___" in para.b
    attr = by_kind["near_miss_attribute"]
    assert not attr.should_hit and attr.answers_a != attr.answers_b  # 1889 vs 330 metres, same sentence
    entity = by_kind["near_miss_entity"]
    # The later document's question about the earlier document's subject: same template, another entity.
    assert not entity.should_hit and entity.a == "Big Ben was completed in which year?"
    assert entity.b == "Eiffel Tower was completed in which year?" and entity.answers_a == ["1859"]
    assert len({p.id for p in pairs}) == len(pairs)
