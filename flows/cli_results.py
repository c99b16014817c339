"""Commands over data and stored results: `dataset`, `questions`, `report`, `gate`, `export` (`reclaim`, an
operation on the index, is in `flows.cli_index`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from corpus.errors import CribsheetError
from flows.app import ConfigOption, app, error_message, prepare_environment, reachable_prefect
from flows.terminal import engine_log, fail, log_path, out, print_decision, print_leaderboard, progress, show_path


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
def questions(
    corpus: Annotated[Path, typer.Option(help="A folder (.md .rst .txt .html .pdf), a .jsonl or a .parquet file.")],
    out_path: Annotated[Path, typer.Option("--out", help="JSONL file of questions to write.")],
    n: Annotated[int | None, typer.Option("--n", help="Questions to write (default: every one found).")] = None,
    per_doc: Annotated[int, typer.Option(help="Questions per document at most from the sentence rules.")] = 2,
    structure_per_doc: Annotated[
        int, typer.Option(help="Questions per document at most from its structure (FAQ, glossary, API, sections).")
    ] = 12,
    llm_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint: an LLM writes them.")] = None,
    llm_model: Annotated[str | None, typer.Option(help="Model name at --llm-url.")] = None,
    pairs: Annotated[
        Path | None, typer.Option(help="Also write paraphrase / near-miss question pairs (answer cache) here.")
    ] = None,
    extension: Annotated[
        list[str], typer.Option(help="Folder mode: SUFFIX=EXTRACTOR, e.g. .txt=rst for Sphinx sources; repeat.")
    ] = [],  # noqa: B006
) -> None:
    """Write answerable questions (question, gold answer aliases, gold document) generated from a corpus:
    rule-based and offline by default (from a documentation tree's structure: FAQ headings, glossary terms,
    API definitions, section leads; then the sentence rules), by an LLM when --llm-url and --llm-model are given.
    """
    from corpus.doc_questions import structured_questions
    from corpus.load import write_jsonl
    from corpus.models import Question
    from corpus.questions import LLMQuestionConfig, QuestionRules, llm_questions, take
    from corpus.sources import SkipLog, SourceConfig, iter_documents
    from flows.options import suffix_pair

    try:
        if (llm_url is None) != (llm_model is None):
            raise CribsheetError("--llm-url and --llm-model go together")
        if n is not None and n < 1:
            raise CribsheetError(f"--n {n}: ask for at least one question")
        found: Sequence[Question]
        source = SourceConfig(path=corpus, extensions=dict(suffix_pair(e) for e in extension))
        docs = list(iter_documents(source, SkipLog()))
        if llm_url and llm_model:
            found = llm_questions(docs, LLMQuestionConfig(base_url=llm_url, model=llm_model), n or len(docs))
        else:
            found = structured_questions(docs, structure_per_doc, QuestionRules(per_doc=per_doc))
        picked = take(found, n, str(corpus))
        write_jsonl(out_path, [q.model_dump() for q in picked])
        if pairs is not None:
            from corpus.question_pairs import question_pairs

            made = question_pairs(docs)
            write_jsonl(pairs, [p.model_dump() for p in made])
            kinds_of = ", ".join(f"{k} {v}" for k, v in sorted(Counter(p.kind for p in made).items()))
            out.print(f"{len(made)} question pairs ({kinds_of})")
    except (CribsheetError, ValueError) as exc:
        fail(error_message(exc))
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(Counter(getattr(q, "kind", "llm") for q in picked).items()))
    out.print(f"{len(picked)} questions from {len(docs)} documents ({kinds})")
    show_path(out_path)


@app.command()
def report(
    store: Annotated[Path, typer.Option(help="DuckDB results file.")],
    run: Annotated[str | None, typer.Option(help="Run id (default: the latest run that stored rows).")] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Folder for pareto.svg, report.md and report.html (default: print only)."),
    ] = None,
    html: Annotated[
        Path | None, typer.Option("--html", help="Write the one-page HTML report (plots inline, no script) here.")
    ] = None,
) -> None:
    """Print the leaderboard of a run; with --out, also write its Pareto plot, markdown and HTML report; with
    --html, the HTML page alone.
    """
    from eval.release_report import write_html_report, write_report
    from eval.store import DuckDBStore

    try:
        db = DuckDBStore(store, read_only=True)
        run_id = run or db.latest_run()
        if run_id is None:
            fail(f"{store}: no runs stored yet")
        rows = db.leaderboard(run_id)
        print_leaderboard(rows, f"run {run_id}", db.run_meta(run_id).validity_lines())
        if out_dir is not None:
            show_path(write_report(db, run_id, out_dir))
        if html is not None:
            show_path(write_html_report(db, run_id, html))
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
    until_decided: Annotated[
        bool,
        typer.Option(
            "--until-decided",
            help="Sweep both settings batch by batch over --sweep-config's questions until the gate decides "
            "(anytime-valid: looking after every batch keeps the policy's error rates).",
        ),
    ] = False,
    sweep_config: Annotated[
        Path | None, typer.Option("--sweep-config", help="Sweep YAML a sequential gate computes with.")
    ] = None,
    batch: Annotated[int | None, typer.Option(min=1, help="Questions per look (sequential) [policy, else 10].")] = None,
    max_questions: Annotated[
        int | None, typer.Option(min=1, help="Question budget (sequential) [policy, else 3000].")
    ] = None,
    seed: Annotated[int | None, typer.Option(min=0, help="Seeds the sequential draw order [0].")] = None,
    shipped: Annotated[
        str | None,
        typer.Option(
            help="The setting in production today: gate every other setting of --run against it (Holm across "
            "them) and end with one recommendation; exit 0 ship or keep shipping, 2 undecided.",
        ),
    ] = None,
) -> None:
    """May this setting ship? Exit 0 pass, 1 fail, 2 could not decide. With --until-decided, computes batch
    after batch until it can decide, every look stored (a killed gate resumes where it stopped). With
    --shipped, which setting of the run should replace the one in production, if any?
    """
    prepare_environment()
    if shipped is not None:
        pair_only = {
            "--config": config_file, "--baseline": baseline, "--candidate": candidate, "--baseline-run": baseline_run,
            "--candidate-run": candidate_run, "--report": report_file, "--until-decided": until_decided or None,
            "--sweep-config": sweep_config, "--batch": batch, "--max-questions": max_questions, "--seed": seed,
        }  # fmt: skip
        given_too = [flag for flag, value in pair_only.items() if value is not None]
        if given_too:
            fail(f"--shipped gates every other setting of the run against {shipped}: drop {', '.join(given_too)}")
        _gate_against_shipped(store, policy, run, shipped)
    from eval.gate import GateDecision, GateRequest
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
        until_decided=until_decided or None,
        sweep_config=sweep_config,
        batch=batch,
        max_questions=max_questions,
        seed=seed,
    )
    try:
        request = load_config(GateRequest, config_file, overrides)
        if request.until_decided:  # it sweeps: the engines' output to a log, progress on the terminal
            log = log_path(request.store_path.parent, "gate")
            with engine_log(log), progress(), reachable_prefect():
                state = gate_flow(request, return_state=True)
        else:
            state = gate_flow(request, return_state=True)
        decision = state.result(raise_on_failure=False)
    except (CribsheetError, ValueError) as exc:
        fail(error_message(exc))
    if not isinstance(decision, GateDecision):  # the flow itself failed: its exception is the result
        fail(error_message(decision) if isinstance(decision, Exception) else f"gate failed: {decision}")
    print_decision(decision)
    raise typer.Exit(decision.exit_code)


def _gate_against_shipped(store: Path | None, policy: Path | None, run: str | None, shipped: str) -> NoReturn:
    """`gate --shipped`: every other setting of `run` (default: the store's latest) against `shipped`, Holm
    across them, the recommendation stored; prints each candidate's verdict line and the recommendation last,
    and exits on it (0 ship or keep shipping, 2 undecided).
    """
    from eval.gate import GateRequest, gate_against_shipped
    from eval.store import DuckDBStore
    from flows.cli_project import print_recommendation

    if store is None:
        fail("--shipped needs --store: the results file holding the run")
    if not store.is_file():
        fail(f"{store}: no results store here")
    try:
        db = DuckDBStore(store)
        run_id = run or db.latest_run()
        if run_id is None:
            fail(f"{store}: no runs stored yet")
        policy_path = policy or GateRequest.model_fields["policy_path"].default
        rec = gate_against_shipped(db, run_id, policy_path, shipped)
    except (CribsheetError, ValueError) as exc:
        fail(error_message(exc))
    print_recommendation(rec)  # the recommendation last
    raise typer.Exit(rec.exit_code)


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
