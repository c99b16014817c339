"""The gate's decision as a Prefect final state, and artifact keys."""

from __future__ import annotations

import pytest

from eval.gate import GateDecision
from flows.artifacts import UNDECIDED, artifact_key, gate_state


@pytest.mark.parametrize(
    ("verdict", "completed", "name"),
    [("pass", True, "Completed"), ("fail", False, "Failed"), ("undecided", False, UNDECIDED)],
)
def test_gate_state_lets_automations_tell_pass_fail_and_undecided_apart(
    verdict: str, completed: bool, name: str
) -> None:
    decision = GateDecision.model_construct(decision=verdict, candidate="llmlingua-4x", baseline="none", reasons=["r1"])
    state = gate_state(decision)
    assert state.is_completed() is completed and state.is_failed() is not completed
    assert state.name == name
    assert state.message == f"{verdict.upper()}: llmlingua-4x vs none: r1"
    assert state.result(raise_on_failure=False) is decision


def test_artifact_keys_are_what_prefect_accepts() -> None:
    assert artifact_key("cribsheet-gate-LLMLingua 4x/k8_hybrid") == "cribsheet-gate-llmlingua-4x-k8-hybrid"
    assert artifact_key("--A--") == "a"
