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
