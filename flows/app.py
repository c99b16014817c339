"""The `cribsheet` Typer app and what every command shares: the quiet offline environment, one-line errors."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Measure crib-sheet levers (rerank, compress, prefix cache) and store the evidence.",
)
ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="YAML file of this command's settings; flags override it.")
]

WorkersOption = Annotated[
    int | None, typer.Option(help="Run on Ray with this many workers (a local cluster unless --ray-address).")
]
RayAddressOption = Annotated[
    str | None, typer.Option(help="Join this Ray cluster (auto, HOST:6379, ray://HOST:10001) [2 workers].")
]


GpusOption = Annotated[
    float | None, typer.Option(help="GPUs per Ray worker (1 on a GPU cluster: each vLLM engine gets one) [0].")
]


def ray_options(workers: int | None, address: str | None, gpus: float | None = None) -> Any:
    """Ray options from the flags, or None to run in this process."""
    if workers is None and address is None:
        return None
    from corpus.cluster import RayOptions

    given: dict[str, Any] = {k: v for k, v in (("workers", workers), ("gpus_per_worker", gpus)) if v is not None}
    return RayOptions.model_validate({"address": address, **given})


def prepare_environment() -> None:
    """Defaults for a quiet, offline, self-contained run; anything the user set wins."""
    from corpus.runtime import quiet_offline_env
    from eval.engine.bundled_models import default_cache_dir

    os.environ.setdefault("PREFECT_HOME", str(default_cache_dir() / "prefect"))
    # Prefect creates only the last folder of its home; on a fresh machine the cache folder is missing too.
    home = Path(os.environ["PREFECT_HOME"]).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    # Prefect 3 derives these two paths from ~/.prefect whatever PREFECT_HOME says (its nested settings' defaults
    # never see the home): without a ~/.prefect, its temporary server printed a warning between our lines that
    # it could not write its memo store, and flow results were written under the user's home, not this one.
    for names, path in (
        (("PREFECT_SERVER_MEMO_STORE_PATH", "PREFECT_MEMO_STORE_PATH"), home / "memo_store.toml"),
        (("PREFECT_RESULTS_LOCAL_STORAGE_PATH", "PREFECT_LOCAL_STORAGE_PATH"), home / "storage"),
    ):
        if not any(name in os.environ for name in names):  # either spelling the user set wins
            os.environ[names[0]] = str(path)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # A fresh PREFECT_HOME migrates its database on the first start: on 2 busy cores that can pass 20 s.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    # The CLI prints user errors itself on one line; Prefect would log each with a traceback first.
    # Scheduled deployments run through a worker and keep Prefect's normal logging.
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
    quiet_offline_env()


def _lost_api(exc: BaseException, api_url: str) -> BaseException | None:
    """The failure to reach `api_url` behind `exc` (its cause or context, at any depth), or None. A
    connection error of another endpoint (a judge server) is not the Prefect API's.
    """
    import httpx

    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, httpx.TransportError):
            request = getattr(cur, "_request", None)
            if request is None or str(request.url).startswith(api_url.rstrip("/")):
                return cur
        cur = cur.__cause__ or cur.__context__
    return None


@contextmanager
def reachable_prefect() -> Iterator[None]:
    """A Prefect API that cannot be reached, when the flow starts or mid-flow, is a one-line user error, not
    a traceback. The store is written in transactions, one whole setting at a time, so what is left is
    consistent: a sweep's run is marked failed and resumes where it stopped.
    """
    from corpus.errors import CribsheetError

    where = os.environ.get("PREFECT_API_URL")
    try:
        yield
    except CribsheetError:
        raise
    except Exception as exc:
        if "Failed to reach API" in str(exc):
            raise CribsheetError(
                f"{exc}: start that Prefect server, or unset PREFECT_API_URL (now {where}) to run on a temporary one"
            ) from None
        lost = _lost_api(exc, where) if where else None
        if lost is None:
            raise
        raise CribsheetError(
            f"lost the Prefect API at {where} mid-flow ({type(lost).__name__}: {lost}); the store keeps only "
            "whole settings: start that server again (or unset PREFECT_API_URL) and run the same command to resume"
        ) from None


def error_message(exc: BaseException) -> str:
    """One line for a user error; a validation error lists each field with its problem."""
    from pydantic import ValidationError

    from flows.config import validation_message

    if isinstance(exc, ValidationError):  # one line: "grid.retrievals.0: Input should be ..."
        return "invalid option: " + validation_message(exc)
    return str(exc)
