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
        self.runner = SettingRunner(config, self.comps, run_id, questions, n_candidates)
        self.warm_report = self.runner.warm()

    def warm(self) -> tuple[WarmReport, str | None]:
        """The prefix-cache warm-up report and the engine's precision."""
        return self.warm_report, getattr(self.comps.generator, "precision", None)

    def compute(self, setting: Setting, index: int, total: int) -> SettingOutput:
        """One setting's rows and claims."""
        return self.runner.compute(setting, index, total)

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
            for worker in workers:
                try:
                    ray.get(worker.close.remote(), timeout=120)
                except Exception:  # a dead worker has nothing left to close
                    pass
                ray.kill(worker)
