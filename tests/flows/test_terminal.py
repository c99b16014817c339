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
