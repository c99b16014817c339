"""The terminal stays readable: engine chatter goes to a log file, our own output to the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.terminal import engine_log, err, log_path, out, progress


def test_engine_chatter_goes_to_the_log_and_ours_to_the_terminal(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    log = log_path(tmp_path, "sweep")
    with engine_log(log):
        os.write(2, b"WARNING triton not found\n")
        os.write(1, b"INFO engine started\n")
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('child process chatter\\n')"], check=True)
        err.print("retrieve: 4/4 in 0.1 s")
        out.print("leaderboard")
    os.write(2, b"after\n")
    captured = capfd.readouterr()
    text = log.read_text()
    assert "triton" in text and "engine started" in text and "child process chatter" in text
    assert "retrieve: 4/4" not in text and "leaderboard" not in text
    assert "retrieve: 4/4" in captured.err and "leaderboard" in captured.out and "after" in captured.err
    assert "triton" not in captured.err + captured.out
    assert log.parent == tmp_path / "logs" and log.name.startswith("sweep-")


def test_progress_without_a_terminal_prints_one_line_per_stage(capfd: pytest.CaptureFixture[str]) -> None:
    from flows.progress import report

    with progress():
        for done in (1, 2, 3):
            report("rerank", done, 3)
        report("setting none-k3-hybrid-dense", 4, 4)
    lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert [line.split(" in ")[0] for line in lines] == ["rerank: 3/3", "setting none-k3-hybrid-dense: 4/4"]


def test_piped_output_keeps_each_line_whole_for_grep() -> None:
    """Without a terminal (a CI log), a long message is one line, not wrapped at rich's 80 (or 200) columns."""
    message = "run r1 (resumed): 0 settings kept, 1 reused from earlier runs, 0 computed" + " ." * 40
    script = (
        "from flows.terminal import err, out\n"
        f"err.print({message!r}, highlight=False)\n"
        f"out.print({message * 2!r}, highlight=False)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stderr.splitlines() == [message]
    assert done.stdout.splitlines() == [message * 2]


NOT_FOR_PEOPLE = r"\b(NULL|None|nan|NaN)\b"
"""How a missing figure must never reach a person: the store's NULL, Python's None, a float's nan."""


def test_missing_figures_are_the_empty_cell_mark_in_the_leaderboard_and_the_decision(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import re

    from eval.cells import EMPTY
    from eval.gate import GateDecision, GatePolicy
    from eval.gate.decision import Labels
    from eval.gate.statistics import LatencyResult, MetricResult
    from flows.terminal import LEADERBOARD_COLUMNS, noise_floor_line, print_decision, print_leaderboard

    # A failed setting: no metrics at all (NULL), a nan mean, and a column the row does not even have.
    empty = {key: None for key, _, _ in LEADERBOARD_COLUMNS} | {"setting_name": "none-k3", "n": 4, "n_failed": 4}
    empty |= {"answer_token_recall": float("nan")}
    del empty["ttft_p50_s"]
    print_leaderboard([empty], "run r1")
    board = capsys.readouterr().out
    assert "none-k3" in board and board.count(EMPTY) == len(LEADERBOARD_COLUMNS) - 3
    assert not re.search(NOT_FOR_PEOPLE, board), board

    metric = MetricResult(
        name="answer_contains", higher_is_better=True, n=40, baseline_mean=0.6, candidate_mean=0.6, diff=0.0,
        ci_low=-0.01, ci_high=0.01, margin=0.02, advisory=False, verdict="pass", mdd=None, n_to_decide=None,
    )  # fmt: skip
    latency = LatencyResult(  # read from the paired ratios only: no mean latency of either side
        metric="e2e_cold_s", n=40, speedup=1.8, ci_low=1.6, ci_high=2.0, min_speedup=1.2, verdict="pass"
    )
    labels = Labels(baseline="none-k8", candidate="pruned-4x-k8", baseline_run="r1", candidate_run="r1")
    decision = GateDecision.make("pass", [], labels, GatePolicy(), 40, [metric], latency)
    print_decision(decision)
    table = capsys.readouterr().out
    assert "decision: PASS" in table and "1.80x" in table and EMPTY in table
    assert not re.search(NOT_FOR_PEOPLE, table), table

    class Floor:  # a noise floor whose interval could not be computed
        ratio, ci_low, ci_high, n = 1.002, float("nan"), None, 3

    line = noise_floor_line(Floor())
    assert "1.002x" in line and f"[{EMPTY}, {EMPTY}]" in line and not re.search(NOT_FOR_PEOPLE, line)
