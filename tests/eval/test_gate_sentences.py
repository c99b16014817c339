"""The default policy on sentence-long references: a compressor that keeps the content passes although no
reference survives verbatim; one that loses half of it fails. Factoids get the same meaningful verdicts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from corpus.text import STOP
from eval.gate import GatePolicy, Labels, decide
from eval.run.scoring import score_answer

ROOT = Path(__file__).resolve().parent.parent.parent
ITEMS = json.loads((ROOT / "tests" / "data" / "sentence_answers.json").read_text())["items"]
LABELS = Labels(baseline="none", candidate="cand", baseline_run="r", candidate_run="r")


def _policy() -> GatePolicy:
    return GatePolicy.load(ROOT / "policies" / "gate.yaml").model_copy(update={"latency": None, "resamples": 2000})


def _squeeze(text: str) -> str:
    """What a token-dropping compressor does to a passage: function words and punctuation go, content stays."""
    return " ".join(w.strip(".,;:") for w in text.split() if w.lower().strip(".,;:") not in STOP)


def _half(text: str) -> str:
    words = text.split()
    return " ".join(words[: len(words) // 2])


def _paraphrase(item: dict[str, str]) -> str:
    """The model's answer: the reference restated ("Erbium is ..." -> "It is ..."), no final period."""
    return "It" + item["reference"].removeprefix(item["id"]).rstrip(".")


Item = dict[str, str]


def _samples(
    answer: Callable[[Item], str], context: Callable[[Item], str], golds: Callable[[Item], list[str]]
) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for item in ITEMS:
        scores = score_answer(answer(item), context(item), golds(item))
        out[item["id"]] = {"status": "ok", "answerable": True, **scores.model_dump()}
    return out


def _sentence(item: dict[str, str]) -> list[str]:
    return [item["reference"]]


def test_sentence_references_pass_a_compressor_that_keeps_the_content() -> None:
    base = _samples(_paraphrase, lambda i: i["passage"], _sentence)
    kept = _samples(_paraphrase, lambda i: _squeeze(i["passage"]), _sentence)
    # The verbatim metric says every reference was lost from the context; the content says otherwise.
    assert all(s["context_answer_recall"] == 1.0 for s in base.values())
    assert all(s["context_answer_recall"] == 0.0 for s in kept.values())
    assert min(s["context_token_recall"] for s in kept.values()) > 0.9
    d = decide(base, kept, _policy(), LABELS)
    assert d.decision == "pass", d.reasons


def test_sentence_references_fail_a_compressor_that_loses_half_the_content() -> None:
    base = _samples(_paraphrase, lambda i: i["passage"], _sentence)
    lost = _samples(
        lambda i: _half(_paraphrase(i)), lambda i: _half(i["reference"]) + " " + i["passage"][400:], _sentence
    )
    d = decide(base, lost, _policy(), LABELS)
    assert d.decision == "fail"
    assert {r.name for r in d.metrics if r.verdict == "fail"} >= {"answer_token_recall", "context_token_recall"}


def test_factoid_references_get_the_same_meaningful_verdicts() -> None:
    def factoid(item: dict[str, str]) -> list[str]:
        return [max(item["reference"].rstrip(".").split()[2:], key=len).strip(",;")]

    base = _samples(_paraphrase, lambda i: i["passage"], factoid)
    kept = _samples(_paraphrase, lambda i: _squeeze(i["passage"]), factoid)
    assert decide(base, kept, _policy(), LABELS).decision == "pass"
    dropped = {i["id"] for i in ITEMS[::2]}  # half of the answers lose the fact
    lost = _samples(
        lambda i: "I am not sure." if i["id"] in dropped else _paraphrase(i), lambda i: i["passage"], factoid
    )
    assert decide(base, lost, _policy(), LABELS).decision == "fail"
