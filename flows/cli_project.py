"""Your own corpus in two commands: `init` writes a project file from what it finds, `run` does all of it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from corpus.errors import CribsheetError
from flows.app import app, error_message, prepare_environment, reachable_prefect
from flows.terminal import (
    engine_log,
    err,
    fail,
    log_path,
    noise_floor_line,
    out,
    print_leaderboard,
    progress,
    seconds,
    show_path,
)

if TYPE_CHECKING:
    from eval.gate import Recommendation


@app.command()
def init(
    corpus: Annotated[Path, typer.Argument(help="A folder tree, a .jsonl or a .parquet file.")],
    out_path: Annotated[Path, typer.Option("--out", help="The project file to write [cribsheet.yaml here].")] = Path(
        "cribsheet.yaml"
    ),
    questions: Annotated[
        Path | None, typer.Option(help="Your question file (JSONL); without it, questions are generated.")
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite a project file you edited.")] = False,
) -> None:
    """Look at a corpus and write a project file for `cribsheet run`: the corpus and how to read it, the
    questions, the grid, the gate policy and where results go, every field commented.
    """
    from flows.project import detect, edited_by_hand, render

    try:
        found_here = detect(corpus)
        if out_path.exists() and edited_by_hand(out_path) and not force:
            raise CribsheetError(
                f"{out_path}: exists and was edited since `cribsheet init` wrote it; --force overwrites"
            )
        text = render(corpus, found_here, questions, out_path)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(text, encoding="utf-8")
    except CribsheetError as exc:
        fail(str(exc))
    found = ", ".join(f"{n} {ext or '(no suffix)'}" for ext, n in list(found_here.counts.items())[:8])
    out.print(f"found in {corpus}: {found}", highlight=False)
    for suffix, reader in found_here.extensions.items():
        out.print(f"  {suffix} files read as {reader} (a Sphinx source tree)", highlight=False)
    for pattern in found_here.exclude:
        out.print(f"  {pattern} not read: the sources of the built HTML pages beside them", highlight=False)
    out.print("questions: " + (str(questions) if questions else "300 generated from the corpus's structure"))
    out.print(f"next: cribsheet run {out_path}", highlight=False)
    show_path(out_path.resolve())


@app.command()
def run(
    project_file: Annotated[Path, typer.Argument(help="The project file `cribsheet init` wrote.")] = Path(
        "cribsheet.yaml"
    ),
) -> None:
    """Everything the project file says: index, questions, sweep, latency, a gate per candidate, the report.
    Exit 1 when a candidate you mean to ship (`candidates:`, every one by default) failed, 2 when a candidate
    could not decide, else 0. With `shipped:` the run ends with one recommendation and exits on it: 0 ship or
    keep shipping, 2 undecided.
    """
    raise typer.Exit(_run_project(project_file, "run")[0])


DEMO_PROJECT = Path(__file__).resolve().parents[1] / "configs" / "demo-project.yaml"
"""The demo's project file: the bundled data, the grid sized for minutes on 2 cores."""
DEMO_FULL_PROJECT = DEMO_PROJECT.with_name("demo-full-project.yaml")


@app.command()
def demo(
    full: Annotated[
        bool,
        typer.Option(
            "--full", help="configs/demo-full-project.yaml: every compressor at top-k 3 and 8, all 85 questions."
        ),
    ] = False,
) -> None:
    """`cribsheet run configs/demo-project.yaml`: the bundled dataset, its index, the demo grid, the latency
    phase, a gate per candidate (the headline one sequentially too) and the report. The verdicts are the
    demo's findings, so it exits 0 whatever they are (`cribsheet run` over the same file exits on them).
    """
    project_file = DEMO_FULL_PROJECT if full else DEMO_PROJECT
    code, recommendation = _run_project(project_file, "demo", end_with_recommendation=False)
    meaning = EXIT_MEANING[code] if recommendation is None else SHIPPED_EXIT_MEANING[code]
    out.print(f"(`cribsheet run {_shown(project_file)}` would exit {code}: {meaning})", highlight=False)
    if recommendation is not None:
        out.print(recommendation, highlight=False, soft_wrap=True)  # the demo ends with it too


EXIT_MEANING = {
    0: "every candidate decided, none you mean to ship failed",
    1: "a candidate you mean to ship failed",
    2: "a candidate could not decide",
}


SHIPPED_EXIT_MEANING = {0: "the grid decided: ship a candidate or keep shipping", 2: "the grid could not decide"}
"""What `run`'s exit code says when the project names `shipped:`."""


def _shown(path: Path) -> str:
    """`path` relative to the working folder when it is inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _run_project(project_file: Path, label: str, end_with_recommendation: bool = True) -> tuple[int, str | None]:
    """Run the project file through the `cribsheet-run` flow and print what a reader needs: the time per
    stage, the leaderboard, the A/A floor, one verdict line per candidate, the report's path, and with
    `shipped:` each setting against the shipped one and the recommendation last (unless the caller prints it
    itself); returns the exit code `cribsheet run` gives (`flows.project.exit_code`) and the recommendation
    line (None: the project names no `shipped:`).
    """
    prepare_environment()
    from eval.gate import verdict_line
    from flows.pipeline import project_flow
    from flows.project import Project, exit_code

    log: Path | None = None
    try:
        project = Project.load(project_file)
        log = log_path(project.workdir, label)
        with engine_log(log), progress(), reachable_prefect():
            result = project_flow(project_file)
    except (CribsheetError, ValueError) as exc:
        if log is not None and log.exists() and not log.stat().st_size:
            log.unlink()  # refused before anything ran: no empty log left behind, none named
            for folder in (log.parent, log.parent.parent):  # the folders made for it, when nothing else is there
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
            log = None
        fail(error_message(exc), log=log)
    sweep = result.sweep
    for stage, secs in sweep.stage_seconds.items():
        err.print(f"  {stage:<48} {secs:8.1f} s", highlight=False)
    if sweep.warm:
        w = sweep.warm
        err.print(
            f"  stable prefix {w.prefix_tokens} tokens, {w.cached_tokens} cached; "
            f"TTFT cold {seconds(w.cold_ttft_s)}, warm {seconds(w.warm_ttft_s)}",
            highlight=False,
        )
    err.print(f"  engine log: {log}", highlight=False)
    print_leaderboard(sweep.leaderboard, f"{label} run {sweep.run_id}", sweep.faithfulness)
    out.print(noise_floor_line(sweep.noise_floor, sweep.load), highlight=False, soft_wrap=True)
    out.print(
        f"release gate, each candidate against its uncompressed twin ({_shown(project.policy)}):", highlight=False
    )
    for decision in result.decisions:
        out.print(f"  {verdict_line(decision)}", highlight=False, soft_wrap=True)
    for decision in result.sequential:
        out.print(
            f"  sequential, batch by batch until decided: {verdict_line(decision)} "
            f"after {decision.n_questions} questions",
            highlight=False,
            soft_wrap=True,
        )
        for note in decision.notes:
            out.print(f"    {note}", highlight=False, soft_wrap=True)
    out.print(f"report: {result.report_path.resolve()}", highlight=False, soft_wrap=True)
    show_path(Path(sweep.store_path).resolve())
    code = exit_code(result.decisions, result.sequential, project.candidates, result.recommendation)
    rec = result.recommendation
    if rec is None:
        return code, None
    print_recommendation(rec, end_with_recommendation)
    return code, rec.line()


def print_recommendation(rec: Recommendation, end_with_recommendation: bool = True) -> None:
    """Each other setting's verdict line against the shipped one, then (unless the caller prints it itself)
    the recommendation, the last line: what to ship. `run` and `gate --shipped` print it so.
    """
    from eval.gate import verdict_line

    sequential = rec.procedure == "holm-anytime"
    how = ", batch by batch until decided" if sequential else ""
    out.print(f"every other setting against the shipped one, {rec.shipped}{how}:", highlight=False, soft_wrap=True)
    for decision in rec.decisions:
        after = f" after {decision.n_questions} questions" if sequential else ""
        out.print(f"  {verdict_line(decision)}{after}", highlight=False, soft_wrap=True)
    if end_with_recommendation:
        out.print(rec.line(), highlight=False, soft_wrap=True)  # the last line: what to ship
