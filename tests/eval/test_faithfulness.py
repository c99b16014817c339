"""Claim-level faithfulness with a fake (hash) embedder: lexical, number and name evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corpus.embed import HashEmbedder
from eval.faithfulness import ClaimChecker, split_claims

CONTEXT = (
    "[1] K2: K2 is the second-highest mountain on Earth, at 8,611 metres above sea level. "
    "It lies in the Karakoram range on the border of Pakistan and China."
)
CASES = json.loads((Path(__file__).parent.parent / "data" / "faithfulness_cases.json").read_text())


@pytest.fixture(scope="module")
def checker() -> ClaimChecker:
    return ClaimChecker(HashEmbedder())


@pytest.mark.parametrize("case", CASES, ids=[c["answer"][:30] for c in CASES])
def test_faithfulness_case(checker: ClaimChecker, case: dict) -> None:
    result = checker.check(case["answer"], case.get("context", CONTEXT))
    assert result.score == case["expected"]
    assert result.status == ("no_claims" if case["expected"] is None else "ok")


def test_evidence_is_kept_per_claim(checker: ClaimChecker) -> None:
    result = checker.check("K2 is 8,611 metres high. It is in the Alps.", CONTEXT)
    assert [c.supported for c in result.claims] == [True, False]
    first, second = result.claims
    assert "8,611 metres" in first.best_span and first.numbers_ok and first.lexical >= 0.5
    assert not second.names_ok  # "Alps" is not in the context
    assert result.score == 0.5


def test_claims_are_sentences_and_abstentions_claim_nothing() -> None:
    assert split_claims("K2 is high. It is in Asia.") == ["K2 is high.", "It is in Asia."]
    assert split_claims("I don't know.") == [] and split_claims("   ") == []
    assert split_claims("The.") == []  # only stop words: nothing to check
