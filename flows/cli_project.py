"""Your own corpus in two commands: `init` writes a project file from what it finds, `run` does all of it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from corpus.errors import CribsheetError
from flows.app import app, error_message, prepare_environment, reachable_prefect
from flows.terminal import engine_log, fail, log_path, noise_floor_line, out, print_leaderboard, progress, show_path


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
    Exit 0 when every candidate passed, 1 when one failed, 2 when one could not decide.
    """
    prepare_environment()
    from eval.gate import verdict_line
    from flows.pipeline import project_flow
    from flows.project import Project, exit_code

    try:
        project = Project.load(project_file)
        log = log_path(project.workdir, "run")
        with engine_log(log), progress(), reachable_prefect():
            result = project_flow(project_file)
    except (CribsheetError, ValueError) as exc:
        fail(error_message(exc))
    print_leaderboard(result.sweep.leaderboard, f"run {result.sweep.run_id}")
    out.print(noise_floor_line(result.sweep.noise_floor), highlight=False, soft_wrap=True)
    for decision in result.decisions:
        out.print(f"  {verdict_line(decision)}", highlight=False, soft_wrap=True)
    out.print(f"report: {result.report_path.resolve()}", highlight=False, soft_wrap=True)
    show_path(Path(result.sweep.store_path).resolve())
    raise typer.Exit(exit_code(result.decisions))
