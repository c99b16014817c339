"""The sweep's heartbeat never dies silently: a failed beat is logged with the run id; a run taken over, or
a heartbeat that keeps failing, stops the sweep at its next step; and a process that lost its run never
closes it (in-process; the two-process takeover is in test_resume.py)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import duckdb
import pytest

from corpus.errors import CribsheetError
from eval.run.resume import Heartbeat, HeartbeatFailed
from eval.store import DuckDBStore
from eval.store.lifecycle import RunTakenOver
from tests.fakes import ExtractingGenerator
from tests.helpers import SweepSetup

LOGGER = "cribsheet.heartbeat"


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Poll `condition` until it holds; fail naming `what` after a generous `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


class _StubStore:
    """A store whose `heartbeat` answers from a script of outcomes (an exception to raise, or None), then
    keeps answering with the last one; it counts the calls."""

    def __init__(self, *outcomes: BaseException | None) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    def heartbeat(self, run_id: str, pid: int, host: str) -> None:
        outcome = self.outcomes[min(self.calls, len(self.outcomes) - 1)]
        self.calls += 1
        if outcome is not None:
            raise outcome


def _heartbeat(store: _StubStore, max_failures: int = 3) -> Heartbeat:
    return Heartbeat(store, "r1", every_s=0.001, max_failures=max_failures)  # type: ignore[arg-type]


def test_a_store_error_that_is_not_ours_is_logged_each_beat_and_ends_the_run_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = _StubStore(OSError("disk gone"))
    caplog.set_level(logging.WARNING, logger=LOGGER)
    beat = _heartbeat(store).start()
    _until(lambda: beat.failure is not None, "the heartbeat to give up")
    beat.stop()

    assert store.calls == 3  # gave up after max_failures in a row, and stopped beating
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        f"heartbeat of run r1 failed ({n} of 3 in a row): OSError: disk gone" for n in (1, 2, 3)
    ]
    assert all(r.exc_info for r in warnings)  # an unexpected error keeps its traceback
    with pytest.raises(HeartbeatFailed, match=r"^run r1: its heartbeat failed 3 times in a row \(last: OSError"):
        beat.check()
    assert any(r.levelno == logging.ERROR and "run r1" in r.getMessage() for r in caplog.records)


def test_a_heartbeat_told_the_run_was_taken_over_stops_at_once_and_the_next_step_raises_that(
    caplog: pytest.LogCaptureFixture,
) -> None:
    taken = RunTakenOver("run r1 is no longer this process's: it was taken over; nothing written")
    store = _StubStore(taken)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    beat = _heartbeat(store).start()
    _until(lambda: beat.failure is not None, "the heartbeat to stop")
    beat.stop()

    assert store.calls == 1 and beat.failure is taken
    with pytest.raises(RunTakenOver, match="taken over"):
        beat.check()
    (record,) = caplog.records
    assert record.levelno == logging.ERROR and record.getMessage().startswith("heartbeat of run r1 refused")


def test_failures_that_do_not_repeat_are_logged_but_leave_the_run_going(caplog: pytest.LogCaptureFixture) -> None:
    busy = CribsheetError("r.duckdb: results store is in use by another process (waited 120 s)")
    store = _StubStore(busy, None, busy, None, busy, None)  # then beats fine
    caplog.set_level(logging.WARNING, logger=LOGGER)
    beat = _heartbeat(store, max_failures=2).start()
    _until(lambda: store.calls >= 8, "eight beats")
    beat.stop()

    beat.check()  # never two failures in a row: nothing ended it
    assert beat.failure is None
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["heartbeat of run r1 failed (1 of 2 in a row): CribsheetError: " + str(busy)] * 3
    assert not any(r.exc_info for r in caplog.records)  # our own one-line errors need no traceback


class _Recorded(Heartbeat):
    """The sweep's heartbeat, beating fast, each one kept for the test to look at."""

    made: list[Heartbeat] = []

    def __init__(self, store: DuckDBStore, run_id: str) -> None:
        super().__init__(store, run_id, every_s=0.005)
        self.made.append(self)


class _EngineHook(ExtractingGenerator):
    """Runs `hook` in the engine call that opens the first setting's generation (its cache reset), then
    serves as usual; what `hook` raises escapes the setting, as a dead engine's error does."""

    def __init__(self, hook: Callable[[], None]) -> None:
        super().__init__()
        self.hook: Callable[[], None] | None = hook

    def reset_cache(self) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        super().reset_cache()


def test_a_sweep_whose_heartbeat_fails_stores_nothing_more_and_is_marked_failed(
    setup: SweepSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eval.run import sweep

    config, components = setup
    failing = threading.Event()
    real = DuckDBStore.heartbeat

    def heartbeat(self: DuckDBStore, run_id: str, pid: int, host: str) -> None:
        if failing.is_set():
            raise OSError("disk gone")
        real(self, run_id, pid, host)

    monkeypatch.setattr(DuckDBStore, "heartbeat", heartbeat)
    monkeypatch.setattr(_Recorded, "made", [])
    monkeypatch.setattr(sweep, "Heartbeat", _Recorded)

    def fail_the_heartbeat() -> None:  # mid-setting: the heartbeat gives up while the engine works
        failing.set()
        _until(lambda: _Recorded.made[0].failure is not None, "the heartbeat to give up")

    generator = _EngineHook(fail_the_heartbeat)
    with pytest.raises(HeartbeatFailed, match="its heartbeat failed 3 times in a row"):
        sweep.run_sweep(config, components(generator))

    store = DuckDBStore(config.store_path)
    (run,) = store.query("SELECT run_id, status, error FROM runs")
    assert run["status"] == "failed" and run["error"].startswith(f"HeartbeatFailed: run {run['run_id']}: ")
    assert store.query("SELECT count(*) AS n FROM samples") == [{"n": 0}]  # not even the setting it was in
    assert len(generator.batches) == 1  # and no further setting was started


def test_a_process_whose_run_was_taken_over_does_not_mark_it_failed_when_its_engine_then_fails(
    setup: SweepSetup,
) -> None:
    from eval.run.sweep import run_sweep

    config, components = setup

    def taken_over_then_engine_dies() -> None:  # what a frozen process finds when it wakes up
        con = duckdb.connect(str(config.store_path))
        con.execute("UPDATE runs SET pid = 1, host = 'the-new-owner'")
        con.close()
        raise RuntimeError("engine died")

    with pytest.raises(RunTakenOver, match="it was taken over") as raised:
        run_sweep(config, components(_EngineHook(taken_over_then_engine_dies)))
    assert isinstance(raised.value.__context__, RuntimeError)  # the engine's error is kept in the chain
    rows = DuckDBStore(config.store_path).query("SELECT status, pid, host, finished_at, error FROM runs")
    assert rows == [{"status": "running", "pid": 1, "host": "the-new-owner", "finished_at": None, "error": None}]
