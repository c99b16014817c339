"""A sweep's settings on Ray workers: each worker holds its own components (one engine each) and computes
whole settings with the same `SettingRunner` as a single-process sweep; the driver writes every setting's
rows in one transaction as it arrives (DuckDB has one writer), so resume and reuse work unchanged.

The latency phase runs on one worker per node (so no two engines share a node's cores while a request is
timed), on nodes of one hardware digest, and streams its blocks back one at a time: the driver stores each
block as it arrives, so a killed phase loses only the blocks in flight and a resumed one skips the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from corpus.cluster import RayOptions, import_plugins, plugin_modules, ray_cluster, worker_error
from corpus.embed import EMBEDDERS
from corpus.errors import CribsheetError
from corpus.models import Question
from eval.compress import COMPRESSORS
from eval.engine.generator import GENERATORS, WarmReport
from eval.faithfulness.judge import JUDGES
from eval.rerank import RERANKERS
from eval.run.latency import LatencyPhase, LiveRequest, probe_questions
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
        self.phase: LatencyPhase | None = None
        """This worker's part of the latency phase, once `begin` started it."""
        self.hits: set[tuple[str, str]] = set()

    def warm(self) -> tuple[WarmReport, str | None]:
        """The prefix-cache warm-up report and the engine's precision."""
        return self.warm_report, getattr(self.comps.generator, "precision", None)

    def compute(self, setting: Setting, index: int, total: int) -> SettingOutput:
        """One setting's rows and claims."""
        return self.runner.compute(setting, index, total)

    def machine(self) -> str | None:
        """The hardware sha256 of the machine this worker runs on (what its slots carry)."""
        return self.runner.measured_on

    def begin(self, hashes: list[str], session_id: str, hits: set[tuple[str, str]], first: Question) -> None:
        """Start this worker's part of the latency phase: one discarded request per setting on `first`."""
        from eval.run.precompute import precomputed_for
        from eval.run.wiring import index_identity

        runner, config = self.runner, self.runner.config
        self.hits = hits
        # The precompute records of this very snapshot, matched on this worker's own compressors (their
        # identity), as the single-process phase does: requests read what a recorded step made, nothing else.
        found = precomputed_for(
            config.index_path,
            index_identity(config, self.comps.index_version),
            self.comps.compressors,
            {(s.compressor, s.target_ratio) for s in self.settings},
        )
        self.phase = LatencyPhase(
            LiveRequest(self.comps, runner.layout, runner.prefix, runner.n_candidates, frozenset(found)),
            self.settings,
            hashes,
            runner.run_id,
            config.probe_repeats,
            config.latency_seed,
            measured_on=runner.measured_on,
            session_id=session_id,
        )
        self.phase.warm_up(first)

    def measure(self, question: Question, repeat: int) -> list[LatencySlotRow]:
        """One block of the latency phase (`question`'s `repeat`-th): every setting timed back to back on this
        worker's one engine, so a pair never spans two workers.
        """
        if self.phase is None:
            raise RuntimeError("SettingWorker.begin() must run before measure()")
        return self.phase.block(question, repeat, self.hits)

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


def measuring_nodes(nodes: list[dict[str, Any]], options: RayOptions) -> list[str]:
    """Ids of the alive Ray nodes (`ray.nodes()`) with the resources of one worker, sorted (the same choice
    on a resumed phase of an unchanged cluster).
    """
    fits = [
        n["NodeID"]
        for n in nodes
        if n.get("Alive")
        and n.get("Resources", {}).get("CPU", 0.0) >= options.cpus_per_worker
        and n.get("Resources", {}).get("GPU", 0.0) >= options.gpus_per_worker
    ]
    return sorted(fits)


def like_machines(machines: list[str | None], stored: set[str]) -> str:
    """The hardware digest the latency phase measures on: one that already timed blocks of this run (a
    resumed phase), else the most common among the nodes; a worker on other hardware stays idle, since the
    gate compares latency only within one machine.
    """
    known = [m for m in machines if m is not None]
    if not known:
        raise CribsheetError("no Ray worker reported its hardware digest; the latency phase cannot be gated")
    again = sorted(stored.intersection(known))
    return again[0] if again else max(sorted(set(known)), key=known.count)


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
    """The latency phase on Ray: one worker per node (at most `options.workers`, on like hardware), the probe
    questions dealt round-robin to them, each measuring every setting of its own questions on its own engine,
    in its own session; the driver stores each block as it arrives (the store's one writer) and summarises
    them. A resumed phase measures only the blocks not yet stored. Returns the phase's session label.
    """
    import uuid

    session = uuid.uuid4().hex[:12]
    hashes = [config.setting_hash(s) for s in settings]
    repeats = config.probe_repeats
    done = store.measured_blocks(run_id, hashes)
    left = [
        q
        for q in probe_questions(questions, config.probe_questions)
        if any((q.id, r) not in done for r in range(repeats))
    ]
    if left:
        hits = store.cache_hit_pairs(run_id)
        stored = {str(r["hardware_sha256"]) for r in store.slots(run_id) if r["hardware_sha256"]} if done else set()
        with ray_cluster(options) as ray:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            nodes = measuring_nodes(ray.nodes(), options)[: min(options.workers, len(left))]
            if not nodes:
                raise CribsheetError(
                    f"no Ray node has the resources of one worker ({options.cpus_per_worker:g} CPUs, "
                    f"{options.gpus_per_worker:g} GPUs) for the latency phase; lower cpus_per_worker/gpus_per_worker"
                )
            actor = ray.remote(num_cpus=options.cpus_per_worker, num_gpus=options.gpus_per_worker)(SettingWorker)
            plugins = sweep_plugins(config, settings)
            # One actor pinned to each node: two engines on one node would time each other's work.
            workers = [
                actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
                    config, run_id, questions, n_candidates, settings, plugins
                )
                for node in nodes
            ]
            try:
                try:
                    machines = ray.get([w.machine.remote() for w in workers])
                except Exception as exc:
                    raise worker_error(exc, "while loading its models for the latency phase") from None
                chosen = like_machines(machines, stored)
                _close(ray, [w for w, m in zip(workers, machines, strict=True) if m != chosen])  # before any timing
                workers = [w for w, m in zip(workers, machines, strict=True) if m == chosen]
                _stream_blocks(ray, workers, left, done, repeats, hashes, session, hits, store, owner)
            finally:
                _close(ray, workers)
    store.summarise_latency(run_id, owner)
    return session


def _stream_blocks(
    ray: Any,
    workers: list[Any],
    left: list[Question],
    done: set[tuple[str, int]],
    repeats: int,
    hashes: list[str],
    session: str,
    hits: set[tuple[str, str]],
    store: Any,
    owner: tuple[int, str] | None,
) -> None:
    """Each worker measures its share of `left` one block at a time (every question's first block, then every
    second, ...), and each block is stored as it arrives. A failed worker ends the phase once the other
    workers' blocks in flight are stored.
    """
    n = len(workers)
    queues = [[(q, r) for r in range(repeats) for q in left[i::n] if (q.id, r) not in done] for i in range(n)]
    try:
        ray.get(
            [
                w.begin.remote(hashes, f"{session}-w{i}", hits, queue[0][0])
                for i, (w, queue) in enumerate(zip(workers, queues, strict=True))
                if queue
            ]
        )
    except Exception as exc:
        raise worker_error(exc, "warming up for the latency phase") from None
    pending: dict[Any, tuple[Any, list[tuple[Question, int]], str]] = {}

    def submit(worker: Any, queue: list[tuple[Question, int]]) -> None:
        question, repeat = queue.pop(0)
        pending[worker.measure.remote(question, repeat)] = (worker, queue, f"{question.id} block {repeat}")

    for worker, queue in zip(workers, queues, strict=True):
        if queue:
            submit(worker, queue)
    failure: Exception | None = None
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        worker, queue, what = pending.pop(ready[0])
        try:
            rows = ray.get(ready[0])
        except Exception as exc:
            failure = failure or worker_error(exc, f"in the latency phase, on question {what}")
            continue
        store.add_slots(rows, owner)  # one block, one transaction
        if queue and failure is None:
            submit(worker, queue)
    if failure is not None:
        raise failure
