"""The sweep: every setting of the grid over the question set, one stored transaction per setting; resumed
after a crash, reusing earlier runs' settings, computed here or on Ray workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from corpus.cluster import RayOptions
from corpus.errors import CribsheetError, InputFileError
from corpus.load import read_jsonl
from corpus.models import Question
from eval.engine.generator import WarmReport
from eval.metrics import cohen_kappa
from eval.run.identity import file_sha256, setting_models_sha256
from eval.run.latency import (
    LatencyPhase,
    LiveRequest,
    NoiseFloor,
    baseline_indices,
    measure_run,
    noise_floor,
    probe_questions,
)
from eval.run.load import load_average
from eval.run.precompute import PrecomputeRecord, precomputed_for
from eval.run.probes import fit_prefill
from eval.run.provenance import new_run_id, question_rows, run_row, setting_rows
from eval.run.resume import Heartbeat, claim_run, reuse_settings
from eval.run.runner import Progress, SettingOutput, SettingRunner
from eval.run.wiring import Components, build_components, index_identity
from eval.settings import Setting, SweepConfig
from eval.store import DuckDBStore, dumps
from eval.store.lifecycle import RunTakenOver
from eval.store.load_figures import PhaseLoad, phase_load

SettingWrap = Callable[[Setting, str, Callable[[], SettingOutput]], SettingOutput]
"""Runs one setting's computation: (setting, run key, compute) -> its output (e.g. as a Prefect task)."""


@dataclass
class SweepResult:
    """What a finished sweep wrote."""

    run_id: str
    store_path: str
    n_samples: int
    stage_seconds: dict[str, float] = field(default_factory=dict)
    leaderboard: list[dict[str, Any]] = field(default_factory=list)
    warm: WarmReport | None = None
    resumed: bool = False
    """The run was an unfinished one, taken up again."""
    settings_kept: int = 0
    """Settings whose stored rows were kept (a resumed run's finished settings): not recomputed."""
    settings_reused: int = 0
    """Settings copied from an earlier run with the same reuse key: not recomputed."""
    settings_computed: int = 0
    noise_floor: NoiseFloor | None = None
    """The latency phase's A/A figure (None: no phase, or no baseline in the grid)."""
    load: PhaseLoad | None = None
    """The load the latency phase ran under: foreign load, split-half drift, failed slots (None: no phase)."""
    faithfulness: list[str] = field(default_factory=list)
    """Per faithfulness column: its method and that method's measured validity on the run's corpus kind."""


class SettingFailed(CribsheetError):
    """A setting failed beyond `max_failed_fraction` (a dead engine fails every sample): the run fails."""


def load_questions(config: SweepConfig) -> list[Question]:
    """Questions from the configured JSONL file, first `limit` of them."""
    return read_questions(config)[0]


def read_questions(config: SweepConfig) -> tuple[list[Question], str]:
    """The questions (first `limit`) and the sha256 of the file, hashed before the read: a caller that hashes
    it again for its identity and finds another digest knows the file was rewritten since, during the read too.
    """
    path = config.questions_path
    before = file_sha256(path) if Path(path).is_file() else ""
    questions = [q for _, q in read_jsonl(path, Question)]
    if not questions:
        raise InputFileError(path, "no questions in file")
    return (questions[: config.limit] if config.limit else questions), before


def run_sweep(
    config: SweepConfig,
    components: Components | None = None,
    progress: Progress | None = None,
    resume: bool = True,
    reuse: bool = True,
    ray: RayOptions | None = None,
    wrap: SettingWrap | None = None,
    timed: Collection[str] | None = None,
) -> SweepResult:
    """Run every setting of the grid over the question set and store one row per question × setting. An
    unfinished run over the same inputs (same fingerprint) is resumed: its finished settings are kept; a
    setting an earlier run computed over the same inputs is copied from it (`reuse`). With `ray`, settings
    are computed on Ray workers, each holding its own engine; this process only retrieves the index version
    and writes the rows (the store's single writer). `wrap` runs each setting's computation (the flows make it
    one Prefect task per setting, with retries). Every write names this process as the run's owner: once
    another process has taken the run over, `RunTakenOver` is raised and the run's row is left to it; a
    heartbeat that keeps failing ends the run as failed (`HeartbeatFailed`). `timed`: the names of the settings
    the latency phase times (None: every setting; the sequential recommendation times only the candidates
    whose latency is still open, and the shipped setting).
    """
    tick = progress or (lambda stage, done, total: None)
    stages: dict[str, float] = {}
    questions, questions_sha256 = read_questions(config)
    settings = config.grid.expand()
    t0 = time.perf_counter()
    on_ray = ray is not None and components is None
    # What the sweep reads, named by content: given components are pinned to their version already.
    ident = index_identity(config, components.index_version if components is not None else None)
    index_version, corpus_sha256 = ident.version, ident.corpus_sha256
    stages["load_models"] = time.perf_counter() - t0
    sweep: _Sweep | None = None
    try:
        store = DuckDBStore(config.store_path)
        new = new_run_id()
        row = run_row(new, config, len(questions), len(settings), ident, ray if on_ray else None)
        if row.questions_sha256 != questions_sha256:  # rewritten between the read and the identity
            raise InputFileError(config.questions_path, "changed while the sweep started; run again once it is written")
        claim = claim_run(
            store,
            row,
            setting_rows(new, config, settings),
            question_rows(new, questions),
            resume,
            config.max_failed_fraction,
        )
        for stage, seconds in claim.stage_seconds.items():
            stages[stage] = stages.get(stage, 0.0) + seconds
        run_id = claim.run_id
        if claim.resumed:
            tick(f"resuming run {run_id}: {len(claim.done)} of {len(settings)} settings kept", 1, 1)
        heartbeat = Heartbeat(store, run_id).start()
        try:
            sweep = _Sweep(config, components, store, run_id, questions, stages, tick, heartbeat)
            sweep.done, sweep.resumed = claim.done, claim.resumed
            sweep.reuse_key = row.reuse_key if reuse else None
            sweep.ray, sweep.index_version, sweep.wrap = (ray if on_ray else None), index_version, wrap
            sweep.corpus_sha256 = corpus_sha256
            sweep.timed = None if timed is None else frozenset(timed)
            return sweep.run(settings)
        except BaseException as exc:
            heartbeat.stop()
            error = f"{type(exc).__name__}: {exc}"[:2000]
            # A run someone else took over is theirs: leave its row alone. The owner condition also refuses the
            # close when the takeover is only found now (this process was frozen past the stale limit), and
            # that RunTakenOver is what the caller sees.
            if not isinstance(exc, RunTakenOver):
                store.finish_run(run_id, "failed", owner=heartbeat.owner, error=error, stage_seconds=dumps(stages))
            raise
        finally:
            heartbeat.stop()
    finally:
        if sweep is not None and sweep.owns_components and sweep.comps is not None:  # the engine we started, we stop
            sweep.comps.close()


@dataclass
class _Sweep:
    """One run in progress: the loop over settings, computed here or on Ray workers, one transaction each."""

    config: SweepConfig
    comps: Components | None
    """This process's backends (None when every setting runs on Ray workers)."""
    store: DuckDBStore
    run_id: str
    questions: list[Question]
    stages: dict[str, float]
    tick: Progress
    heartbeat: Heartbeat
    done: set[str] = field(default_factory=set)
    """Settings already stored by an earlier attempt of this run: kept, not recomputed."""
    resumed: bool = False
    reuse_key: str | None = None
    """Reuse settings of earlier runs with this key (None: compute every setting)."""
    ray: RayOptions | None = None
    """Compute settings on Ray workers (each with its own engine) instead of in this process."""
    index_version: int | None = None
    """The index version this run reads (Ray workers are pinned to it)."""
    corpus_sha256: str | None = None
    """The digest of that version's documents, computed once for the run row."""
    wrap: SettingWrap | None = None
    owns_components: bool = False
    """`comps` were built here (for the settings left to compute) and are closed by `run_sweep`."""
    runner: SettingRunner | None = None
    """This process's runner (built for the first setting to compute, or for the latency phase)."""
    precomputes: dict[tuple[str, float], PrecomputeRecord] = field(default_factory=dict)
    """The precompute records whose compressions the latency phase's requests read, by (compressor, ratio)."""
    latency_session: str | None = None
    """The latency phase's measurement session (None: no phase ran)."""
    timed: frozenset[str] | None = None
    """The settings the latency phase times (None: every setting of the run)."""

    def _pinned(self) -> SweepConfig:
        """The config with the index version this run claimed, for every model built for it (here or on Ray)."""
        return self.config.model_copy(update={"index_version": self.index_version})

    def _components(self, todo: list[Setting]) -> Components:
        """The backends of this process: the ones passed in, or built now for the settings left to compute only,
        so a rerun that keeps or reuses most of its grid loads no model those settings alone would need.
        """
        if self.comps is None:
            t0 = time.perf_counter()
            self.comps = build_components(self._pinned(), todo, corpus_sha256=self.corpus_sha256)
            self.owns_components = True
            self.stages["load_models"] = self.stages.get("load_models", 0.0) + time.perf_counter() - t0
        return self.comps

    def _runner(self, settings: list[Setting], n_candidates: int, todo: list[Setting] | None = None) -> SettingRunner:
        """The runner of this process, warmed, with the components of every setting of the grid (the latency phase
        measures reused and kept settings too).
        """
        if self.runner is None:
            # With no latency phase, a rerun that keeps or reuses most of its grid loads only what is left.
            comps = self._components(settings if self.config.probe_questions or todo is None else todo)
            self.runner = SettingRunner(self.config, comps, self.run_id, self.questions, n_candidates, self.tick)
            self.runner.warm_report = self.runner.warm()
        return self.runner

    def _latency(self, settings: list[Setting], n_candidates: int) -> NoiseFloor | None:
        """The latency phase over every setting of the run (`eval.run.latency`), here or on the Ray workers."""
        probes = probe_questions(self.questions, self.config.probe_questions)
        if not probes:
            return None
        self.heartbeat.check()
        hashes = [self.config.setting_hash(s) for s in settings]
        if self.ray is not None:
            from eval.run.ray_driver import measure_on_ray

            self.latency_session = measure_on_ray(
                self.ray, self._pinned(), self.run_id, self.questions, n_candidates, settings, self.store,
                self.heartbeat.owner,
            )  # fmt: skip
            return noise_floor(self.store, self.run_id, [hashes[i] for i in baseline_indices(settings)])
        runner = self._runner(settings, n_candidates)
        self.precomputes = precomputed_for(
            self.config.index_path,
            index_identity(self.config, self.index_version),
            runner.comps.compressors,
            {(s.compressor, s.target_ratio) for s in settings},
        )
        phase = LatencyPhase(
            LiveRequest(runner.comps, runner.layout, runner.prefix, n_candidates, frozenset(self.precomputes)),
            settings,
            hashes,
            self.run_id,
            self.config.probe_repeats,
            self.config.latency_seed,
            measured_on=runner.measured_on,
            tick=self.tick,
        )
        self.latency_session = phase.session_id
        _, floor = measure_run(self.store, phase, probes, self.heartbeat.owner)
        return floor

    def run(self, settings: list[Setting]) -> SweepResult:
        """Every setting, one transaction each; then the run's summary."""
        todo = [s for s in settings if self.config.setting_hash(s) not in self.done]  # a resumed run keeps the rest
        reused = 0
        if self.reuse_key:
            t0 = time.perf_counter()
            todo, reused = reuse_settings(
                self.store,
                self.reuse_key,
                self.run_id,
                todo,
                self.config.setting_hash,
                self.tick,
                self.config.max_failed_fraction,
                owner=self.heartbeat.owner,
                models=partial(setting_models_sha256, self.config),
            )
            self.stages["reuse"] = self.stages.get("reuse", 0.0) + time.perf_counter() - t0
        # The grid's largest top-k sets the candidate count, for computed and kept settings alike.
        n_candidates = max(self.config.retrieve_n, *(s.top_k for s in settings))
        n_rows = 0
        warm: WarmReport | None = None
        precision: str | None = None

        def write(out: SettingOutput) -> None:
            nonlocal n_rows
            self.heartbeat.check()  # a run taken over, or no longer heartbeating, stores nothing more
            for stage, seconds in out.stages.items():
                self.stages[stage] = self.stages.get(stage, 0.0) + seconds
            if out.spill is not None:  # a large setting's rows, set aside block by block
                try:
                    self.store.add_spilled_samples(out.spill.close(), owner=self.heartbeat.owner)
                finally:
                    out.spill.remove()
            else:
                self.store.add_samples(out.rows, out.claims, owner=self.heartbeat.owner)
            n, failed, first_error = out.counts()
            n_rows += n
            self.tick(f"stored {out.setting.name}", n, n)
            if failed:
                self.tick(f"{out.setting.name}: failed samples", failed, failed)
            if n and failed > self.config.max_failed_fraction * n:
                raise SettingFailed(
                    f"setting {out.setting.name}: {failed} of {n} samples failed (more than "
                    f"max_failed_fraction {self.config.max_failed_fraction:g}); first: {first_error}; "
                    "the run is marked failed with its rows kept; fix the cause and run again to resume it"
                )

        if todo and self.ray is not None:
            from eval.run.ray_driver import run_on_ray

            pinned = self._pinned()
            warm, precision = run_on_ray(self.ray, pinned, self.run_id, self.questions, n_candidates, todo, write)
        elif todo:
            runner = self._runner(settings, n_candidates, todo)
            warm, precision = runner.warm_report, getattr(runner.comps.generator, "precision", None)
            for index, setting in enumerate(todo, start=1):
                self.heartbeat.check()  # before a setting's work, not only at its write
                compute = partial(runner.compute, setting, index, len(todo))
                write(self.wrap(setting, self.reuse_key or self.run_id, compute) if self.wrap else compute())
        t0, load_avg = time.perf_counter(), load_average()
        floor = self._latency([s for s in settings if self.timed is None or s.name in self.timed], n_candidates)
        self.stages["latency"] = self.stages.get("latency", 0.0) + time.perf_counter() - t0
        load = phase_load(self.store, self.run_id, load_avg) if self.latency_session else None
        if self.runner is not None:
            self.stages["warm"] = self.stages.get("warm", 0.0) + self.runner.stages.get("warm", 0.0)
            warm = warm or self.runner.warm_report
            precision = precision or getattr(self.runner.comps.generator, "precision", None)
        probes = self.store.probe_points(self.run_id)  # every setting's probes, measured in the latency phase
        fit = fit_prefill(probes)
        pairs = self.store.judge_pairs(self.run_id)
        verified = self.store.judge_pairs(self.run_id, "model_supported")
        self.heartbeat.stop()
        self.store.finish_run(
            self.run_id,
            "ok",
            owner=self.heartbeat.owner,
            stage_seconds=dumps(self.stages),
            warm_prefix_tokens=warm.prefix_tokens if warm else None,
            warm_cached_tokens=warm.cached_tokens if warm else None,
            warm_cold_ttft_s=warm.cold_ttft_s if warm else None,
            warm_warm_ttft_s=warm.warm_ttft_s if warm else None,
            prefill_a=fit[0] if fit else None,
            prefill_b=fit[1] if fit else None,
            prefill_fit_points=len(probes),
            engine_precision=precision,
            judge_kappa=cohen_kappa(pairs) if self.config.judge is not None else None,
            judge_claims=len(pairs) if self.config.judge is not None else None,
            verifier_kappa=cohen_kappa(verified) if self.config.verifier is not None else None,
            verifier_claims=len(verified) if self.config.verifier is not None else None,
            probe_repeats=self.config.probe_repeats if self.latency_session else None,
            latency_session=self.latency_session,
            aa_ratio=floor.ratio if floor else None,
            aa_ci_low=floor.ci_low if floor else None,
            aa_ci_high=floor.ci_high if floor else None,
            aa_n=floor.n if floor else None,
            foreign_load=load.foreign_load if load else None,
            load_avg=load.load_avg if load else None,
            latency_drift=load.drift if load else None,
            latency_drift_setting=load.drift_setting if load else None,
            failed_slots=load.failed_slots if load else None,
            precomputes_json=dumps([r.model_dump(mode="json") for r in self.precomputes.values()])
            if self.precomputes
            else None,
        )
        return SweepResult(
            run_id=self.run_id,
            store_path=str(self.config.store_path),
            n_samples=n_rows,
            stage_seconds=self.stages,
            leaderboard=self.store.leaderboard(self.run_id),
            warm=warm,
            resumed=self.resumed,
            settings_kept=len(settings) - len(todo) - reused,
            settings_reused=reused,
            settings_computed=len(todo),
            noise_floor=floor,
            load=load,
            faithfulness=self.store.run_meta(self.run_id).validity_lines(),
        )
