"""REVIEW #22: a failed row is never carried into later runs on trust. A setting whose source holds a failed
row is computed again; only a failure seen in two computations of the setting (not a copy of one) is copied.
So "rerun before gating" clears a transient failure, and a failure that comes back costs one computation."""

from __future__ import annotations

import duckdb

from eval.run.sweep import run_sweep
from tests.fakes import HalvingCompressor
from tests.helpers import SweepSetup


def failed_rows(store: str, run_id: str) -> list[tuple[str, str]]:
    with duckdb.connect(store, read_only=True) as con:
        return con.execute(
            "SELECT setting_name, question_id FROM samples WHERE run_id = ? AND status <> 'ok' ORDER BY ALL", [run_id]
        ).fetchall()


def test_a_rerun_computes_a_setting_with_a_transient_failure_again(setup: SweepSetup) -> None:
    config, components = setup
    config = config.model_copy(update={"max_failed_fraction": 0.5})  # 1 question of 4 fails: the run is ok
    n = len(config.grid.expand())
    flaky = run_sweep(config, components(halving=HalvingCompressor(fail_on="K2")))
    assert failed_rows(flaky.store_path, flaky.run_id)  # the halving settings failed on the K2 question
    healthy = run_sweep(config, components(), resume=False)
    # The settings without a failure are copied; the two halving settings are computed again, and pass.
    assert (healthy.settings_reused, healthy.settings_computed) == (n - 2, 2)
    assert failed_rows(healthy.store_path, healthy.run_id) == []


def test_a_failure_that_comes_back_is_computed_once_more_then_copied(setup: SweepSetup) -> None:
    config, components = setup
    config = config.model_copy(update={"max_failed_fraction": 0.5})
    n = len(config.grid.expand())
    first = run_sweep(config, components(halving=HalvingCompressor(fail_on="K2")))
    second = run_sweep(config, components(halving=HalvingCompressor(fail_on="K2")), resume=False)
    assert (second.settings_reused, second.settings_computed) == (n - 2, 2)  # not trusted yet: computed
    third = run_sweep(config, components(halving=HalvingCompressor(fail_on="K2")), resume=False)
    assert (third.settings_reused, third.settings_computed) == (n, 0)  # failed twice alike: copied
    rows = failed_rows(first.store_path, first.run_id)
    assert rows and failed_rows(third.store_path, third.run_id) == rows  # the failure stays, never dropped
