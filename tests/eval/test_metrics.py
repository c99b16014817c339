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


def test_every_metric_declares_its_direction_and_what_it_reads() -> None:
    """The gate reads directions from here: answer quality is higher-is-better, latency and cost lower."""
    from eval.metrics import DIRECTIONS, POPULATIONS

    assert {name for name, m in METRICS.items() if m.on == "context"} == {
        "context_answer_recall",
        "context_token_recall",
    }
    assert all(DIRECTIONS[name] is True for name in METRICS)
    assert [k for k, v in DIRECTIONS.items() if v is False] == [
        "ttft_s",
        "probe_ttft_s",
        "e2e_latency_s",
        "e2e_cold_s",
        "e2e_paid_s",
        "prompt_tokens",
        "compress_seconds",
        "compress_cold_seconds",
    ]
    assert POPULATIONS["abstained"] == "unanswerable" and POPULATIONS["answer_contains"] == "answerable"


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


def test_every_gateable_column_is_a_stored_column() -> None:
    from eval.metrics import DIRECTIONS
    from eval.store.rows import SampleRow

    assert set(DIRECTIONS) <= set(SampleRow.model_fields)


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
    from eval.metrics import answer_contains, answer_token_recall, exact_match, normalize

    assert normalize("U.S.") == normalize("US") and exact_match("the U.S.", ["US"]) == 1.0
    assert normalize("1990,1991") == "1990 1991" and normalize("8,611 m") == "8611 m"
    assert answer_contains("Paris, London, Berlin or Rome", ["Rome"]) == 0.0  # names every candidate
    assert answer_contains("Either Liverpool or Manchester.", ["Liverpool"]) == 0.0
    assert answer_contains("Rome, the capital of Italy", ["Rome"]) == 1.0  # a comma is not a hedge
    # A bare list of three or more names hedges whatever joins them; a sentence with commas does not.
    assert answer_contains("Paris, London, Rome, Berlin", ["Paris"]) == 0.0
    assert answer_token_recall("Paris, London and Rome.", ["Paris"]) == 0.0
    assert answer_contains("Paris is the capital, the largest city, and the seat of government.", ["Paris"]) == 1.0
