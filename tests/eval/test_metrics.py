import json
from pathlib import Path

import pytest

from eval.metrics import METRICS, normalize

CASES = json.loads((Path(__file__).parent.parent / "data" / "metric_cases.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[f"{c['metric']}:{c['prediction'][:20]}" for c in CASES])
def test_metric_case(case: dict) -> None:
    got = METRICS[case["metric"]].fn(case["prediction"], case["golds"])
    assert got == pytest.approx(case["expected"], abs=case.get("tolerance", 1e-9))


def test_normalize_folds_case_accents_punctuation_articles_and_thousands() -> None:
    assert normalize("The Café, 8,611 m!") == "cafe 8611 m"


def test_every_metric_declares_direction() -> None:
    assert all(m.higher_is_better in (True, False) for m in METRICS.values())
    assert {m.on for m in METRICS.values()} <= {"answer", "context"}


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("I don't know.", True),
        ("I do not know", True),
        ("The passages do not contain the answer.", True),
        ("It is not mentioned in the passages.", True),
        ("", False),  # no answer at all is not an abstention: answer metrics score it 0
        ("Cannot answer from the context", True),
        ("Liverpool", False),
        ("The answer is 1631.", False),
        ("I know it is Paris", False),
    ],
)
def test_abstention_detection(answer: str, expected: bool) -> None:
    from eval.metrics import abstained

    assert abstained(answer) is expected


def test_every_stored_metric_has_a_direction() -> None:
    from eval.metrics import DIRECTIONS

    assert all(DIRECTIONS[name] == m.higher_is_better for name, m in METRICS.items())
    assert DIRECTIONS["ttft_s"] is False and DIRECTIONS["faithfulness"] is True


def test_abstention_detector_on_a_table_of_phrasings() -> None:
    """Both kinds of error: abstentions it must catch and negative statements about the world it must not."""
    import json
    from pathlib import Path

    from eval.metrics import abstained

    cases = json.loads((Path(__file__).resolve().parents[1] / "data" / "abstention_cases.json").read_text())
    assert len(cases) >= 30 and {c["abstained"] for c in cases} == {True, False}
    wrong = [c["answer"] for c in cases if abstained(c["answer"]) != c["abstained"]]
    assert wrong == []


def test_squad_normalisation_hedges_and_numbers() -> None:
    from eval.metrics import answer_contains, exact_match, normalize

    assert normalize("U.S.") == normalize("US") and exact_match("the U.S.", ["US"]) == 1.0
    assert normalize("1990,1991") == "1990 1991" and normalize("8,611 m") == "8611 m"
    assert answer_contains("Paris, London, Berlin or Rome", ["Rome"]) == 0.0  # names every candidate
    assert answer_contains("Either Liverpool or Manchester.", ["Liverpool"]) == 0.0
    assert answer_contains("Rome, the capital of Italy", ["Rome"]) == 1.0  # a comma is not a hedge
