"""Commands over stored results: `report`, `gate`, `export`, and the bundled `dataset`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from corpus.errors import CribsheetError
from flows.app import ConfigOption, app, error_message, prepare_environment
from flows.terminal import fail, out, print_decision, print_leaderboard, show_path


@app.command()
def dataset(out_dir: Annotated[Path, typer.Option("--out", help="Folder for the files.")] = Path("datasets")) -> None:
    """Build the bundled corpus and question sets from the installed packages."""
    try:
        from corpus.bundled import build_bundled

        manifest = build_bundled(out_dir)
    except CribsheetError as exc:
        fail(str(exc))
    for name, info in manifest["files"].items():
        out.print(f"{out_dir / name}: {info['records']} records, sha256 {info['sha256'][:12]}")
    show_path(out_dir / "MANIFEST.json")


@app.command()
def report(
    store: Annotated[Path, typer.Option(help="DuckDB results file.")],
    run: Annotated[str | None, typer.Option(help="Run id (default: the latest run).")] = None,
) -> None:
    """Print the leaderboard of a run."""
    from eval.store import DuckDBStore

    try:
        db = DuckDBStore(store, read_only=True)
        run_id = run or db.latest_run()
        if run_id is None:
            fail(f"{store}: no runs stored yet")
        print_leaderboard(db.leaderboard(run_id), f"run {run_id}")
    except CribsheetError as exc:
        fail(str(exc))


@app.command()
def gate(
    config_file: ConfigOption = None,
    store: Annotated[Path | None, typer.Option(help="DuckDB results file.")] = None,
    baseline: Annotated[str | None, typer.Option(help="Baseline setting (name or hash).")] = None,
    candidate: Annotated[str | None, typer.Option(help="Candidate setting (name or hash).")] = None,
    policy: Annotated[Path | None, typer.Option(help="Gate policy YAML [policies/gate.yaml].")] = None,
    run: Annotated[str | None, typer.Option(help="Run holding both settings (default: latest).")] = None,
    baseline_run: Annotated[str | None, typer.Option(help="Run of the baseline, when runs differ.")] = None,
    candidate_run: Annotated[str | None, typer.Option(help="Run of the candidate, when runs differ.")] = None,
    report_file: Annotated[Path | None, typer.Option("--report", help="Markdown report path.")] = None,
) -> None:
    """May this setting ship? Exit 0 pass, 1 fail, 2 could not decide."""
    prepare_environment()
    from eval.gate import GateRequest
    from flows.config import given, load_config
    from flows.pipeline import gate_flow

    overrides = given(
        store_path=store,
        baseline=baseline,
        candidate=candidate,
        policy_path=policy,
        run=run,
        baseline_run=baseline_run,
        candidate_run=candidate_run,
        report_path=report_file,
    )
    try:
        decision = gate_flow(load_config(GateRequest, config_file, overrides))
    except (CribsheetError, ValueError) as exc:
        fail(error_message(exc))
    print_decision(decision)
    raise typer.Exit(decision.exit_code)


@app.command()
def export(
    store: Annotated[Path, typer.Option(help="DuckDB results file.")],
    parquet: Annotated[Path, typer.Option(help="Folder for one Parquet file per table.")],
) -> None:
    """Write every table of the results store as Parquet."""
    from eval.store import DuckDBStore

    try:
        written = DuckDBStore(store, read_only=True).export_parquet(parquet)
    except CribsheetError as exc:
        fail(str(exc))
    for path in written:
        out.print(str(path))
    show_path(parquet)
