"""Ray, the engine indexing and sweeps scale out on: the options, and a cluster connection for one job.

Without an address a local cluster of `workers` CPUs is started for the job and stopped after it; with one
(`auto`, `HOST:6379` of a `ray start --head`, or `ray://HOST:10001`) the job joins that cluster. Every node
needs the same environment (cribsheet and its model packages installed) and the same view of the paths the
job reads (the corpus, the LanceDB index): a shared filesystem or object storage.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from corpus.errors import CribsheetError
from corpus.registry import Registry


class RayOptions(BaseModel):
    """Where and how wide a job runs on Ray. Not part of the config hash (answers do not depend on it), but
    part of a sweep's fingerprint and reuse key: latency measured by 2 workers on 1 core each is not latency
    measured by 1 process on 2 cores.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    address: str | None = None
    """Cluster to join (`auto`, `HOST:6379`, `ray://HOST:10001`); None starts a local one for the job."""
    workers: int = Field(default=2, ge=1)
    """Worker actors (each holds its own models: one engine per worker)."""
    cpus_per_worker: float = Field(default=1.0, gt=0)
    gpus_per_worker: float = Field(default=0.0, ge=0)
    """1 on a GPU cluster: each worker's vLLM engine gets a GPU of its own."""


def plugin_modules(registries: Iterable[tuple[Registry[Any, Any], str]]) -> list[str]:
    """Modules outside cribsheet that registered the named components: a worker imports them, so a
    component a user (or a test) registered is built there under the same name.
    """
    modules = {registry.entry(name.partition(":")[0]).factory.__module__ for registry, name in registries}
    return sorted(m for m in modules if m.split(".")[0] not in {"corpus", "eval", "flows"})


def import_plugins(modules: Iterable[str]) -> None:
    """Import each module (inside a worker: registers the components it defines)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise CribsheetError(f"plugin module '{module}' does not import: {exc}") from None


def env_plugins() -> list[str]:
    """Modules named in `CRIBSHEET_PLUGINS` (comma-separated): components registered outside cribsheet, for
    processes started by others (a Prefect worker's flow runs).
    """
    return [m.strip() for m in os.environ.get("CRIBSHEET_PLUGINS", "").split(",") if m.strip()]


@contextmanager
def ray_cluster(options: RayOptions) -> Iterator[Any]:
    """The `ray` module, connected for the duration of the block (a local cluster is started and stopped)."""
    import ray

    if ray.is_initialized():  # a caller (a test, a notebook) already connected: use it, leave it running
        yield ray
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        if options.address:
            ray.init(address=options.address, log_to_driver=False)
        else:
            cpus = max(1, round(options.workers * options.cpus_per_worker))
            ray.init(
                num_cpus=cpus,
                num_gpus=round(options.workers * options.gpus_per_worker),
                include_dashboard=False,
                log_to_driver=False,
            )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = options.address or "a local cluster"
        raise CribsheetError(f"could not start or reach Ray at {where}: {str(exc).splitlines()[0]}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def worker_error(exc: BaseException, what: str) -> CribsheetError:
    """A one-line error for a failure inside a Ray worker, naming what it was doing and the original error."""
    cause = getattr(exc, "cause", None) or exc
    first = str(cause).strip().splitlines()
    return CribsheetError(f"Ray worker failed {what}: {type(cause).__name__}: {first[-1] if first else ''}")
