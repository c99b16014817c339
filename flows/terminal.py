"""What the CLI shows a person: progress (bars on a terminal, one line per stage elsewhere), tables, errors,
and engine chatter kept out of the way in a log file.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TextIO

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from eval.cells import cell

# Piped (a CI log): a printed line stays one line whatever its length, so grep finds it (rich would wrap it at
# 80 columns, or 200); tables keep a fixed width so the leaderboard is not squeezed.
err = Console(stderr=True, soft_wrap=not sys.stderr.isatty())
out = Console(width=None if sys.stdout.isatty() else 200, soft_wrap=not sys.stdout.isatty())

LEADERBOARD_COLUMNS = [
    ("setting_name", "setting", "{}"),
    ("n", "n", "{}"),
    ("n_failed", "failed", "{}"),
    ("answer_token_recall", "answer tok rec", "{:.3f}"),
    ("context_token_recall", "context tok rec", "{:.3f}"),
    ("faithfulness", "faithful", "{:.3f}"),
    ("realized_ratio", "ratio", "{:.2f}"),
    ("mean_prompt_tokens", "prompt tok", "{:.0f}"),
    ("probe_ttft_p50_s", "TTFT alone p50 s", "{:.3f}"),
    ("e2e_cold_p50_s", "e2e live p50 s", "{:.3f}"),
    ("mean_offline_s", "offline s/req", "{:.3f}"),
    ("mean_compress_cold_s", "answers-phase compress s", "{:.3f}"),
    ("ttft_p50_s", "batch TTFT p50 s (queued)", "{:.3f}"),
]
"""What a person reads first: the gate's answer and context metrics (token recall), then latency as a request
sees it (TTFT of the prompt run alone after a cache reset, and the whole request timed live end to end: retrieve,
rerank, the compressor computing the context as a first request pays it, TTFT alone), the offline bill a request
read but did not pay (a recorded precompute's compressions, index-time vectors: never in the end-to-end figure),
the answers phase's compressor seconds; the batch TTFT includes queueing behind the other prompts and comes last."""


MODEL_COLUMN = ("faithfulness_model", "faithful (model)", "{:.3f}")
"""The model verifier's column, after the rule checker's, shown when a verifier ran."""


def seconds(value: float | None) -> str:
    """A duration for people: milliseconds precision, or n/a when the engine reported none."""
    return "n/a" if value is None else f"{value:.3f} s"


def fail(message: str, code: int = 2, log: Path | None = None) -> NoReturn:
    """Print a one-line error (and where the engine log is) and exit."""
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    if log is not None:
        err.print(f"engine log: {log}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def show_path(path: Path | str) -> None:
    """The last line of a writing command: where it wrote."""
    out.file.write(f"{path}\n")
    out.file.flush()


@contextmanager
def progress() -> Iterator[Callable[[str, int, int], None]]:
    """Install a progress reporter for the flows: bars on a terminal, one line per stage otherwise."""
    from flows.progress import LineReporter, set_reporter

    if not err.is_terminal:

        def line(message: str) -> None:
            err.print(message, highlight=False, soft_wrap=True)

        reporter = LineReporter(line)
        set_reporter(reporter)
        try:
            yield reporter
        finally:
            reporter.close()
            set_reporter(None)
        return
    bars: dict[str, Any] = {}
    with Progress(
        TextColumn("{task.description:<40}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as bar:

        def tick(stage: str, done: int, total: int) -> None:
            if stage not in bars:
                bars[stage] = bar.add_task(stage, total=total)
            bar.update(bars[stage], completed=done, total=total)

        set_reporter(tick)
        try:
            yield tick
        finally:
            set_reporter(None)


def log_path(folder: Path, command: str) -> Path:
    """A fresh log file for one command run: `<folder>/logs/<command>-<UTC time>.log`."""
    return Path(folder) / "logs" / f"{command}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}.log"


@contextmanager
def engine_log(path: Path) -> Iterator[Path]:
    """Send everything written to file descriptors 1 and 2 (engine warnings, child processes, third-party
    progress bars) to `path`, while our own consoles keep writing to the terminal.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    terminal: tuple[TextIO, TextIO] = (
        os.fdopen(os.dup(saved[0]), "w", buffering=1),
        os.fdopen(os.dup(saved[1]), "w", buffering=1),
    )
    # Consoles without a file of their own follow sys.stdout/sys.stderr; restore exactly that afterwards.
    consoles = (out._file, err._file)
    out.file, err.file = terminal
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    try:
        yield path
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log_fd):
            os.close(fd)
        out._file, err._file = consoles
        for stream in terminal:
            stream.close()


def print_leaderboard(rows: list[dict[str, Any]], title: str, faithfulness: Sequence[str] = ()) -> None:
    """The leaderboard as a terminal table; a missing figure (a NULL, a nan) is the empty-cell mark. Under it,
    the method behind each faithfulness column and how far it can be trusted on this corpus kind.
    """
    table = Table(title=title)
    columns = list(LEADERBOARD_COLUMNS)
    if any(r.get("faithfulness_model") is not None for r in rows):
        columns.insert(columns.index(("faithfulness", "faithful", "{:.3f}")) + 1, MODEL_COLUMN)
    for _, header, _ in columns:
        table.add_column(header, justify="left" if header == "setting" else "right")
    for row in rows:
        table.add_row(*[cell(row.get(key), fmt) for key, _, fmt in columns])
    out.print(table)
    for line in faithfulness:
        shown = line.replace("faithfulness_model:", "faithful (model):", 1).replace("faithfulness:", "faithful:", 1)
        out.print(shown, highlight=False, soft_wrap=True)


def noise_floor_line(floor: Any, load: Any = None) -> str:
    """The latency phase's load (foreign CPU, split-half drift, failed slots) and its A/A figure, in two lines."""
    from eval.store.load_figures import phase_text

    if floor is None:
        aa = "A/A twins: not measured (no probe questions, or no uncompressed setting)"
    else:
        aa = (
            f"A/A twins: {cell(floor.ratio, '{:.3f}x')} [{cell(floor.ci_low, '{:.3f}')}, "
            f"{cell(floor.ci_high, '{:.3f}')}] over {floor.n} paired probes: two identical requests at random places "
            "in their blocks (1.000x: no order or position bias; load shows in the line above, not here)"
        )
    return f"{phase_text(load)}\n{aa}"


def print_decision(d: Any) -> None:
    """The gate decision as a terminal table."""
    from eval.gate import DECISION_COLUMNS, decision_rows

    colour = {"pass": "green", "fail": "red"}.get(d.decision, "yellow")
    title = f"gate: {d.candidate} vs {d.baseline} ({d.n_questions} paired questions)"
    rows = decision_rows(d)
    if rows:
        table = Table(title=title)
        for header in DECISION_COLUMNS:
            label = f"{d.policy.confidence:.0%} CI" if header == "CI" else header
            table.add_column(label, justify="left" if header == "metric" else "right")
        for row in rows:
            table.add_row(*row)
        out.print(table)
    else:  # a sequential decision: its reasons are the last look of each metric, no fixed-n table to print
        out.print(title, highlight=False)
    for reason in d.reasons:
        out.print(f"  {reason}", highlight=False)
    for note in d.notes:
        out.print(f"  note: {note}", highlight=False)
    out.print(f"[{colour}]decision: {d.decision.upper()}[/{colour}] (exit {d.exit_code})")
