"""The CLI's handling of a Prefect API that goes away: one line, whatever wraps the connection failure."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import httpx
import pytest

from corpus.errors import CribsheetError
from flows.app import reachable_prefect


class ConcurrencySlotAcquisitionError(Exception):
    """What Prefect raises when a task cannot reach the API for its tags' slots (wraps the connection error)."""


def _lost_mid_flow(url: str = "http://127.0.0.1:4200/api/v2/concurrency_limits/increment") -> None:
    try:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=httpx.Request("POST", url))
    except httpx.ConnectError as exc:
        raise ConcurrencySlotAcquisitionError("Unable to acquire concurrency slots") from exc


def test_a_connection_lost_mid_flow_is_one_line_naming_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    with pytest.raises(CribsheetError) as caught, reachable_prefect():
        _lost_mid_flow()
    message = str(caught.value)
    assert message.startswith("lost the Prefect API at http://127.0.0.1:4200/api mid-flow (ConnectError: ")
    assert "run the same command to resume" in message and "\n" not in message


def test_other_errors_pass_through_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    with pytest.raises(ZeroDivisionError), reachable_prefect():
        1 / 0  # noqa: B018
    with pytest.raises(ConcurrencySlotAcquisitionError), reachable_prefect():
        _lost_mid_flow("http://127.0.0.1:8011/v1/chat/completions")  # a judge server's, not Prefect's
    monkeypatch.delenv("PREFECT_API_URL")  # a temporary server: its loss is not the user's to fix
    with pytest.raises(ConcurrencySlotAcquisitionError), reachable_prefect():
        _lost_mid_flow()
    with pytest.raises(CribsheetError, match="Failed to reach API"), reachable_prefect():
        raise RuntimeError("Failed to reach API at http://127.0.0.1:9/api")


def test_warm_closes_the_engine_when_warming_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    import eval.run.wiring
    from flows.cli import app
    from tests.fakes import ExtractingGenerator

    class Broken(ExtractingGenerator):
        def warm(self, prefix: str) -> NoReturn:
            raise CribsheetError("the engine died while warming")

    made: list[Broken] = []
    monkeypatch.setattr(eval.run.wiring, "build_generator", lambda config: made.append(Broken()) or made[-1])
    monkeypatch.setenv("CRIBSHEET_CACHE", str(tmp_path))  # the engine log goes here
    result = CliRunner().invoke(app, ["warm"])
    assert result.exit_code == 2 and "the engine died while warming" in result.output
    assert len(made) == 1 and made[0].closed  # no engine process left behind


def test_flows_under_test_run_in_their_own_prefect_home_with_room_for_its_server_to_start() -> None:
    """Prefect reads its settings once, at import: set later (in a fixture), they would not be seen."""
    import os

    from prefect.settings import PREFECT_HOME, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

    assert PREFECT_HOME.value() == Path(os.environ["PREFECT_HOME"]) != Path.home() / ".prefect"
    assert PREFECT_HOME.value().name.startswith("cribsheet-test-prefect-")
    assert PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value() == 180


def test_prefects_memo_store_and_result_storage_lie_in_the_prefect_home_the_cli_creates(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Prefect derives both paths from ~/.prefect whatever PREFECT_HOME says; the CLI puts them in its home."""
    import os

    from flows.app import prepare_environment

    fresh = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    monkeypatch.setattr(os, "environ", fresh | {"CRIBSHEET_CACHE": str(tmp_path / "cache")})
    prepare_environment()
    home = tmp_path / "cache" / "prefect"
    assert os.environ["PREFECT_HOME"] == str(home) and home.is_dir()
    assert os.environ["PREFECT_SERVER_MEMO_STORE_PATH"] == str(home / "memo_store.toml")
    assert os.environ["PREFECT_RESULTS_LOCAL_STORAGE_PATH"] == str(home / "storage")

    mine = str(tmp_path / "mine.toml")  # a user's own setting, in either of Prefect's spellings, wins
    monkeypatch.setattr(os, "environ", fresh | {"PREFECT_HOME": str(home), "PREFECT_MEMO_STORE_PATH": mine})
    prepare_environment()
    assert os.environ["PREFECT_MEMO_STORE_PATH"] == mine and "PREFECT_SERVER_MEMO_STORE_PATH" not in os.environ
