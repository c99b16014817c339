"""A sweep's settings on Ray workers: each worker holds its own components (one engine each) and computes
whole settings with the same `SettingRunner` as a single-process sweep; the driver writes every setting's
rows in one transaction as it arrives (DuckDB has one writer), so resume and reuse work unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from corpus.cluster import RayOptions, import_plugins, plugin_modules, ray_cluster, worker_error
from corpus.embed import EMBEDDERS
from corpus.models import Question
from eval.compress import COMPRESSORS
from eval.engine.generator import GENERATORS, WarmReport
from eval.faithfulness.judge import JUDGES
from eval.rerank import RERANKERS
from eval.run.runner import SettingOutput, SettingRunner
from eval.settings import Setting, SweepConfig
from eval.store.rows import LatencySlotRow


class SettingWorker:
    """Ray actor: the components of a sweep, built once, computing one setting per call."""

    def __init__(
        self,
        config: SweepConfig,
        run_id: str,
        questions: list[Question],
        n_candidates: int,
        settings: list[Setting],
        plugins: list[str],
    ) -> None:
        from corpus.runtime import quiet_offline_env
        from eval.run.wiring import build_components

        quiet_offline_env()
        import_plugins(plugins)
        self.comps = build_components(config, settings)
        self.settings = settings
        # rows travel back to the driver, which may be another machine: none set aside in a local file here
        self.runner = SettingRunner(config, self.comps, run_id, questions, n_candidates, spill_rows=False)
        self.warm_report = self.runner.warm()

    def warm(self) -> tuple[WarmReport, str | None]:
        """The prefix-cache warm-up report and the engine's precision."""
        return self.warm_report, getattr(self.comps.generator, "precision", None)

    def compute(self, setting: Setting, index: int, total: int) -> SettingOutput:
        """One setting's rows and claims."""
        return self.runner.compute(setting, index, total)

    def measure(
        self, questions: list[Question], hits: set[tuple[str, str]], hashes: list[str], session_id: str
    ) -> list[LatencySlotRow]:
        """The latency phase over this worker's share of the probe questions: every setting of each of them,
        timed back to back on this worker's one engine (a pair never spans two workers).
        """
        from eval.run.latency import LatencyPhase, LiveRequest

        runner, config = self.runner, self.runner.config
        phase = LatencyPhase(
            LiveRequest(self.comps, runner.layout, runner.prefix, runner.n_candidates),
            self.settings,
            hashes,
            runner.run_id,
            config.probe_repeats,
            config.latency_seed,
            measured_on=runner.measured_on,
            session_id=session_id,
        )
        rows: list[LatencySlotRow] = []
        phase.run(questions, hits, rows.extend)
        return rows

    def close(self) -> None:
        """Stop this worker's engines."""
        self.comps.close()


def sweep_plugins(config: SweepConfig, settings: list[Setting]) -> list[str]:
    """Modules registering the sweep's components outside cribsheet (a worker imports them first)."""
    names: list[tuple[Any, str]] = [(EMBEDDERS, config.embedder), (GENERATORS, config.generator.name)]
    names += [(COMPRESSORS, s.compressor) for s in settings] + [(RERANKERS, s.reranker) for s in settings]
    if config.judge is not None:
        names.append((JUDGES, config.judge.name))
    return plugin_modules(names)


def run_on_ray(
    options: RayOptions,
    config: SweepConfig,
    run_id: str,
    questions: list[Question],
    n_candidates: int,
    todo: list[Setting],
    write: Callable[[SettingOutput], None],
) -> tuple[WarmReport | None, str | None]:
    """Compute `todo` on up to `options.workers` actors, calling `write` (in this process) per finished
    setting. Returns the first worker's warm-up report and engine precision.
    """
    if not todo:
        return None, None
    with ray_cluster(options) as ray:
        # A worker that dies (out of memory, a lost node) is restarted once and its setting retried.
        actor = ray.remote(
            num_cpus=options.cpus_per_worker, num_gpus=options.gpus_per_worker, max_restarts=1, max_task_retries=2
        )(SettingWorker)
        plugins = sweep_plugins(config, todo)
        workers = [
            actor.remote(config, run_id, questions, n_candidates, todo, plugins)
            for _ in range(min(options.workers, len(todo)))
        ]
        try:
            try:
                warm, precision = ray.get(workers[0].warm.remote())
            except Exception as exc:
                raise worker_error(exc, "while loading its models") from None
            queue = list(enumerate(todo, start=1))
            pending: dict[Any, tuple[Any, Setting]] = {}

            def submit(worker: Any) -> None:
                index, setting = queue.pop(0)
                pending[worker.compute.remote(setting, index, len(todo))] = (worker, setting)

            for worker in workers[: len(queue)]:
                submit(worker)
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                worker, setting = pending.pop(ready[0])
                try:
                    out = ray.get(ready[0])
                except Exception as exc:
                    raise worker_error(exc, f"on setting {setting.name}") from None
                write(out)
                if queue:
                    submit(worker)
            return warm, precision
        finally:
            _close(ray, workers)


def _close(ray: Any, workers: list[Any]) -> None:
    """Stop every worker's engines, then the actor (a dead worker has nothing left to close)."""
    for worker in workers:
        try:
            ray.get(worker.close.remote(), timeout=120)
        except Exception:
            pass
        ray.kill(worker)


def measure_on_ray(
    options: RayOptions,
    config: SweepConfig,
    run_id: str,
    questions: list[Question],
    n_candidates: int,
    settings: list[Setting],
    store: Any,
    owner: tuple[int, str] | None = None,
) -> str:
    """The latency phase on Ray: the probe questions dealt round-robin to the workers, each worker measuring
    every setting of its own questions on its own engine, in its own session; the driver stores each worker's
    slots (the store's one writer) and summarises them. Returns the phase's session label.
    """
    import uuid

    from eval.run.latency import probe_questions

    session = uuid.uuid4().hex[:12]
    hashes = [config.setting_hash(s) for s in settings]
    probes = probe_questions(questions, config.probe_questions)
    done = store.measured_questions(run_id, hashes, config.probe_repeats)
    todo = [q for q in probes if q.id not in done]
    if todo:
        hits = store.cache_hit_pairs(run_id)
        with ray_cluster(options) as ray:
            actor = ray.remote(num_cpus=options.cpus_per_worker, num_gpus=options.gpus_per_worker)(SettingWorker)
            plugins = sweep_plugins(config, settings)
            n = min(options.workers, len(todo))
            workers = [actor.remote(config, run_id, questions, n_candidates, settings, plugins) for _ in range(n)]
            try:
                shares = [todo[i::n] for i in range(n)]
                futures = [
                    w.measure.remote(share, hits, hashes, f"{session}-w{i}")
                    for i, (w, share) in enumerate(zip(workers, shares, strict=True))
                ]
                for future in futures:
                    try:
                        rows = ray.get(future)
                    except Exception as exc:
                        raise worker_error(exc, "in the latency phase") from None
                    for qid in dict.fromkeys(r.question_id for r in rows):
                        store.add_slots([r for r in rows if r.question_id == qid], owner)
            finally:
                _close(ray, workers)
    store.summarise_latency(run_id, owner)
    return session
