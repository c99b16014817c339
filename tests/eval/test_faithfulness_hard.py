"""The hard labelled set: each rewrite keeps or breaks faithfulness as labelled, and the checker's verdict on
each kind (with a hash embedder, so only the lexical and structural checks speak)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.sets.faithfulness_hard import FAITHFUL, UNFAITHFUL, build_hard_cases, read_hard_set
from corpus.models import Document
from eval.faithfulness.checker import ClaimChecker
from tests.fakes import HashEmbedder

MONACO = Document(
    id="Monaco",
    title="Monaco",
    text="Monaco is a sovereign city-state on the French Riviera in Western Europe. Although French is the "
    "official language of Monaco, Italian and Monégasque are also widely spoken. The principality was "
    "ruled by Rainier III from 1949 until 2005. It is not a member of the European Union. Monaco has the "
    "largest population density of any country, with 38,423 residents in 2016.",
)
OTHERS = [
    Document(
        id=f"D{i}",
        title=f"Topic {i}",
        text=f"Topic {i} is a subject studied in Paris. It was named in 19{i}0 by Jean "
        "Dupont. It is not widely known outside France.",
    )
    for i in range(1, 5)
]


def test_every_case_is_labelled_by_its_kind_and_the_split_is_stable() -> None:
    cases = build_hard_cases([MONACO, *OTHERS], 5)
    monaco = {c.kind: c for c in cases if c.doc_id == "Monaco"}
    assert monaco["wrong_candidate"].answer == "Italian is the official language of Monaco."
    assert "is not not" not in monaco["negation_added"].answer and " not " in monaco["negation_added"].answer
    assert "smallest" in monaco["attribute"].answer
    assert all(c.faithful == (c.kind in FAITHFUL) for c in cases)
    assert {c.kind for c in cases} <= set(FAITHFUL) | set(UNFAITHFUL)
    assert [c.split for c in cases] == [c.split for c in build_hard_cases([MONACO, *OTHERS], 5)]


@pytest.mark.parametrize(
    ("answer", "supported"),
    [
        ("Italian is the official language of Monaco.", False),  # the wrong candidate of the sentence
        ("French is the official language of Monaco.", True),
        ("Monaco is a member of the European Union.", False),  # negation removed
        ("Monaco is not a sovereign city-state.", False),  # negation added
        ("Monaco has the smallest population density of any country.", False),  # attribute flipped
        ("Monaco was ruled by Rainier III from 1949 until 2016.", False),  # a number of the same context
        ("Monaco has 38423 residents.", True),  # number format
    ],
)
def test_checker_verdicts_on_the_hard_kinds(answer: str, supported: bool) -> None:
    context = f"[1] Monaco: {MONACO.text}"
    assert ClaimChecker(HashEmbedder()).check(answer, context).score == (1.0 if supported else 0.0)


def test_frozen_set_is_large_balanced_enough_and_split() -> None:
    cases = read_hard_set(Path(__file__).resolve().parent.parent.parent / "benchmarks/data/faithfulness_hard.json")
    assert len(cases) >= 1000
    assert {c.split for c in cases} == {"tune", "test"}
    assert set(FAITHFUL) <= {c.kind for c in cases} and set(UNFAITHFUL) <= {c.kind for c in cases}


def test_a_demonym_and_its_country_say_the_same() -> None:
    context = "[1] Henrik Ibsen: Henrik Ibsen was a Norwegian playwright and theatre director."
    checker = ClaimChecker(HashEmbedder())
    assert checker.check("Henrik Ibsen was a playwright from Norway.", context).score == 1.0
    assert checker.check("Henrik Ibsen was a playwright from Sweden.", context).score == 0.0


def test_the_frozen_set_is_what_its_builder_makes(bundled_dir: Path) -> None:
    from corpus.bundled import CORPUS_FILE
    from corpus.sources import SkipLog, SourceConfig, iter_documents

    docs = list(iter_documents(SourceConfig(path=bundled_dir / CORPUS_FILE), SkipLog()))
    frozen = read_hard_set(Path(__file__).resolve().parent.parent.parent / "benchmarks/data/faithfulness_hard.json")
    assert [c.model_dump() for c in build_hard_cases(docs, 400, 40)] == [c.model_dump() for c in frozen]
