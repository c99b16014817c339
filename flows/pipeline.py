"""Prefect flows: each only sequences tasks that wrap plain library functions.

Every flow takes its typed config directly or a `config_file` (YAML of the same model), so a deployment
in `prefect.yaml` and `cribsheet <command> --config FILE` are driven by the same file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from prefect import State, flow, task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel

from corpus.bundled import build_bundled
from corpus.chunk import SentenceChunker
from corpus.cluster import RayOptions, env_plugins, import_plugins
from corpus.embed import build_embedder
from corpus.errors import CribsheetError
from corpus.index import IndexConfig, IndexReport, sync_index
from corpus.runtime import quiet_offline_env
from corpus.sources import SkipLog, extractor_versions, iter_documents
from corpus.table import IndexOptions
from eval.gate import (
    GateDecision,
    GateRequest,
    Recommendation,
    gate_against_shipped,
    gate_each_compressed,
    run_gate,
    watch_line,
    watch_shipped,
)
from eval.gate.policy import ShippedSetting
from eval.release_report import write_report
from eval.run.runner import SettingOutput
from eval.run.sequential_grid import GridOutcome
from eval.run.sweep import SettingWrap, SweepResult, run_sweep
from eval.settings import Setting, SweepConfig
from eval.store import DuckDBStore
from flows.artifacts import (
    gate_state,
    publish_gate,
    publish_leaderboard,
    publish_looks,
    publish_recommendation,
    publish_report,
)
from flows.config import load_config
from flows.progress import report
from flows.project import Project

M = TypeVar("M", bound=BaseModel)
import_plugins(env_plugins())  # components registered outside cribsheet, for flow runs a worker starts


def _config(model: type[M], config: M | None, config_file: Path | None) -> M:
    """The flow's config: given directly, or read from `config_file` (exactly one of them)."""
    if (config is None) == (config_file is None):
        raise CribsheetError(f"give either a {model.__name__} or a config file, not {'both' if config else 'neither'}")
    return config if config is not None else load_config(model, config_file)


@task(name="build-bundled-dataset")
def build_dataset_task(out_dir: Path) -> dict[str, Any]:
    """Write the bundled corpus, questions and manifest."""
    return build_bundled(out_dir)


@task(name="index-corpus")
def index_task(config: IndexConfig, ray: RayOptions | None = None) -> IndexReport:
    """Stream, chunk, embed and sync the LanceDB index (only new or changed documents are embedded); with
    `ray`, chunking and embedding run on Ray workers.
    """
    quiet_offline_env()  # a scheduled run through a worker never went through the CLI
    emb = build_embedder(config.embedder)
    skips = SkipLog()
    return sync_index(
        iter_documents(config.source, skips),
        SentenceChunker(config.chunker, emb.count_tokens),
        emb,
        config.index_path,
        config.options,
        progress=lambda done, total: report("index (documents)", done, total),
        skipped=skips.items,
        extractors=extractor_versions(config.source),
        ray=ray,
        embedder_ref=config.embedder,
    )


@task(
    name="compute-setting",
    task_run_name="{setting.name}",
    retries=2,
    retry_delay_seconds=5,
    cache_policy=NO_CACHE,  # the store is the cache: finished settings are kept or reused by key
)
def setting_task(setting: Setting, run_key: str, compute: Callable[[], SettingOutput]) -> SettingOutput:
    """One setting of a sweep (compress, generate, judge, probe); retried on a transient failure. Nothing is
    written here, so a retry starts clean; `run_key` (the run's reuse key) and the setting hash identify it.
    """
    return compute()


def settings_in_tasks(config: SweepConfig) -> SettingWrap:
    """Each setting of `config`'s sweep as its own task run, tagged with the setting's hash as the store keeps
    it (`config.setting_hash`: with its compressor's knobs when they are not the defaults) and the run's key.
    """

    def in_task(setting: Setting, run_key: str, compute: Callable[[], SettingOutput]) -> SettingOutput:
        tags = [f"setting:{config.setting_hash(setting)}", f"run:{run_key}"]
        return setting_task.with_options(tags=tags)(setting, run_key, compute)

    return in_task


@task(name="sweep")
def sweep_task(
    config: SweepConfig, resume: bool = True, reuse: bool = True, ray: RayOptions | None = None
) -> SweepResult:
    """Run the grid over the question set and store the rows (resuming an unfinished run of the same inputs);
    with `ray`, settings are computed on Ray workers, one engine each.
    """
    quiet_offline_env()
    return run_sweep(config, progress=report, resume=resume, reuse=reuse, ray=ray, wrap=settings_in_tasks(config))


@task(name="gate")
def gate_task(request: GateRequest) -> GateDecision:
    """Decide whether the candidate may ship; the decision row is written to the store."""
    return run_gate(request)


@task(name="gate-each-compressed", cache_policy=NO_CACHE)
def gate_each_task(store_path: Path, run_id: str, policy_path: Path) -> list[GateDecision]:
    """Gate every compressed setting of the run against no compression at the same top-k."""
    return gate_each_compressed(DuckDBStore(store_path), run_id, policy_path)


@task(name="gate-against-shipped", cache_policy=NO_CACHE)
def recommend_task(store_path: Path, run_id: str, policy_path: Path, shipped: str) -> Recommendation:
    """Gate every other setting of the run against the shipped one, Holm across them: one recommendation."""
    return gate_against_shipped(DuckDBStore(store_path), run_id, policy_path, shipped)


@task(name="sequential-recommendation", cache_policy=NO_CACHE)
def sequential_grid_task(
    sweep: SweepConfig, shipped: str, policy_path: Path, run_id: str, report_dir: Path
) -> GridOutcome:
    """Every other setting of the grid against `shipped`, batch by batch until decided, Holm over anytime-valid
    p-values (`eval.run.sequential_grid`): the recommendation stored under `run_id`.
    """
    from eval.run.sequential_grid import SequentialGridRequest, run_sequential_grid

    quiet_offline_env()
    request = SequentialGridRequest(
        sweep=sweep, shipped=shipped, policy_path=policy_path, run_id=run_id, report_dir=report_dir
    )
    return run_sequential_grid(request, progress=report)


@task(name="release-report", cache_policy=NO_CACHE)
def report_task(store_path: Path, run_id: str, out_dir: Path) -> Path:
    """The run's Pareto plot and markdown report (with break-even and the gate decisions)."""
    return write_report(DuckDBStore(store_path), run_id, out_dir)


@flow(name="cribsheet-index", log_prints=True)
def index_flow(
    config: IndexConfig | None = None, config_file: Path | None = None, ray: RayOptions | None = None
) -> IndexReport:
    """Index a corpus (folder, JSONL or Parquet) into LanceDB; `ray` spreads chunking and embedding over a
    Ray cluster's workers (a local one when it names no address).
    """
    return index_task(_config(IndexConfig, config, config_file), ray)


@flow(name="cribsheet-sweep", log_prints=True)
def sweep_flow(
    config: SweepConfig | None = None,
    config_file: Path | None = None,
    resume: bool = True,
    reuse: bool = True,
    ray: RayOptions | None = None,
    watch_policy: Path | None = None,
) -> SweepResult:
    """Sweep the grid of settings and store results in DuckDB (the leaderboard also as a table artifact).
    A run over the same inputs that did not finish (crashed, killed) is resumed unless `resume` is False;
    settings an earlier run computed over the same inputs are copied unless `reuse` is False; `ray` computes
    settings on Ray workers (one engine each) while this flow writes the rows. With `watch_policy` naming a
    shipped setting (its `shipped` block), tonight's rows of that setting are gated against the run it shipped
    on: the flow run ends Failed (`ShippedSettingRegressed`, naming the metric that moved) when it got worse;
    a clean night says so in one line.
    """
    sweep = _config(SweepConfig, config, config_file)
    result = sweep_task(sweep, resume, reuse, ray)
    publish_leaderboard(result)
    if watch_policy is None:
        return result
    watched = watch_task(sweep.store_path, result.run_id, watch_policy)
    if watched is None:
        print(f"watch: {watch_policy} names no shipped setting; nothing watched")
        return result
    publish_gate(watched)
    line = watch_line(watched)
    print(line)
    if watched.decision == "fail":
        raise ShippedSettingRegressed(line)
    return result


class ShippedSettingRegressed(CribsheetError):
    """Tonight's rows of the shipped setting are worse than the run it shipped on (the watch's FAIL)."""


@task(name="watch-shipped", cache_policy=NO_CACHE)
def watch_task(
    store_path: Path, run_id: str, policy_path: Path, shipped: ShippedSetting | None = None
) -> GateDecision | None:
    """Tonight's rows of the shipped setting (`shipped`, else the policy's block) against the run it shipped
    on (None: no shipped setting).
    """
    return watch_shipped(DuckDBStore(store_path), run_id, policy_path, shipped)


@flow(name="cribsheet-gate", log_prints=True)
def gate_flow(request: GateRequest | None = None, config_file: Path | None = None) -> State[GateDecision]:
    """The release gate for one candidate setting against a baseline. The flow run ends Completed on pass,
    Failed on fail, and Failed named "Undecided" when the gate could not decide, so a Prefect automation
    can block a release on either; the decision is the state's result and a markdown artifact.
    """
    req = _config(GateRequest, request, config_file)
    decision = sequential_gate_task(req) if req.until_decided else gate_task(req)
    publish_gate(decision)
    return gate_state(decision)


@task(name="sequential-gate", cache_policy=NO_CACHE)
def sequential_gate_task(request: GateRequest, sweep: SweepConfig | None = None) -> GateDecision:
    """Sweep the two settings batch by batch until the gate decides (every look stored, a killed gate resumed
    where it stopped), computing with `sweep` (else the request's `sweep_config` file); the looks as a
    markdown artifact, the decision as a `GateDecision`.
    """
    from eval.gate import GatePolicy
    from eval.run.sequential_gate import as_decision, from_gate_request, run_sequential_gate

    if sweep is None and request.sweep_config is None:
        raise CribsheetError("a sequential gate (--until-decided) needs --sweep-config: what to compute with")
    quiet_offline_env()
    sequential = from_gate_request(request, sweep or load_config(SweepConfig, request.sweep_config))
    outcome = run_sequential_gate(sequential, progress=report)
    publish_looks(outcome.model_dump(mode="json"), request.baseline, request.candidate)
    return as_decision(outcome, GatePolicy.load(request.policy_path), request.baseline, request.candidate)


@dataclass
class ProjectResult:
    """What `cribsheet run` did: the sweep, one fixed-n decision per candidate, the sequential ones, the report."""

    sweep: SweepResult
    decisions: list[GateDecision]
    report_path: Path
    questions_path: Path
    sequential: list[GateDecision] = field(default_factory=list)
    """Candidates gated batch by batch until decided (the policy's `sequential:` block, the project's list)."""
    recommendation: Recommendation | None = None
    """Every other setting against the project's `shipped:` one, Holm across them (None: no `shipped:`)."""


@task(name="project-questions", cache_policy=NO_CACHE)
def project_questions_task(project: Project) -> Path:
    """The project's question file: its own, or questions generated from the corpus's structure once and
    reused (the corpus not read again) until the synced index's corpus digest or the request changes.
    """
    from corpus.snapshot import latest_snapshot
    from flows.project_questions import generated_questions

    if project.questions.path is not None:
        return Path(project.questions.path)  # read through before anything was indexed (`check_inputs`)
    snapshot = latest_snapshot(project.index_path)
    made = generated_questions(project, snapshot.corpus_sha256 if snapshot is not None else None)
    print(made.line())
    return made.path


@flow(name="cribsheet-run", log_prints=True)
def project_flow(project_file: Path) -> ProjectResult:
    """Everything a project file says: check everything it will read (the policy, the models, the setting
    names, the corpus and question file) before any work, sync the index, generate the questions unless
    given, sweep (reusing what is unchanged), gate every compressed setting against its uncompressed twin
    (sequentially too when the policy has a `sequential:` block), with `shipped:` gate every other setting
    against the shipped one and recommend, write the report.
    """
    from flows.project_checks import check_inputs, check_settings

    project = Project.load(project_file)
    policy = check_settings(project, project_file)
    if project.dataset is not None:
        build_dataset_task(project.dataset)
    check_inputs(project, project_file)
    index_task(
        IndexConfig(
            source=project.corpus,
            index_path=project.index_path,
            embedder=project.embedder,
            options=IndexOptions(sentence_vectors=True),
        )
    )
    questions = project_questions_task(project)
    config = project.sweep_config(questions)
    result = sweep_task(config)
    publish_leaderboard(result)
    if project.shipped_setting is not None:  # `shipped: {setting, run}`: the nightly watch, as the sweep flow's
        watched = watch_task(config.store_path, result.run_id, project.policy, project.shipped_setting)
        if watched is not None:  # never None with a setting given
            publish_gate(watched)
            line = watch_line(watched)
            print(line)
            if watched.decision == "fail":
                raise ShippedSettingRegressed(line)
    decisions = gate_each_task(config.store_path, result.run_id, project.policy)
    sequential: list[GateDecision] = []
    recommendation = None
    every = config.model_copy(update={"limit": None})
    if policy.sequential is not None and project.shipped is not None:
        # Every candidate against the shipped setting batch by batch, past the sweep's `limit`, Holm over
        # anytime-valid p-values: the recommendation. The twin gates above stay as fixed-n diagnostics.
        grid = sequential_grid_task(every, project.shipped, project.policy, result.run_id, project.workdir / "report")
        recommendation = grid.recommendation  # its decisions are each candidate's, printed with it
    elif policy.sequential is not None:
        # The sequential gate goes on past the sweep's `limit`, batch by batch over the whole question file.
        wanted = project.sequential
        for d in [d for d in decisions if wanted is None or d.candidate in wanted]:
            request = GateRequest(
                store_path=config.store_path,
                baseline=d.baseline,
                candidate=d.candidate,
                policy_path=project.policy,
                until_decided=True,
                report_path=project.workdir / "report" / f"sequential-{d.candidate}.md",
            )
            sequential.append(sequential_gate_task(request, every))
    if project.shipped is not None and recommendation is None:
        # The twin gates above stay as diagnostics; what may replace the shipped setting is decided here.
        recommendation = recommend_task(config.store_path, result.run_id, project.policy, project.shipped)
    for decision in [*decisions, *sequential]:
        publish_gate(decision)
    report_path = report_task(config.store_path, result.run_id, project.workdir / "report")
    publish_report(report_path, result.run_id)
    if recommendation is not None:
        publish_recommendation(recommendation)  # with every candidate's verdicts against the shipped setting
    return ProjectResult(result, decisions, report_path, questions, sequential, recommendation)
