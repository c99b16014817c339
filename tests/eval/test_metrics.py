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
        ("", True),
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
