"""Latency probes run alone: each after a cache reset and the stable prefix warmed again, so no probe is
served the blocks of an earlier probe that shared its leading passage (or its whole prompt)."""

from __future__ import annotations

from pathlib import Path

import duckdb

from eval.run.sweep import run_sweep
from tests.conftest import TINY_QUESTIONS, write_jsonl
from tests.fakes import ExtractingGenerator
from tests.helpers import SweepSetup


def test_the_fake_engine_serves_an_earlier_probes_blocks_until_a_reset() -> None:
    """The check below can fail: without a reset, a second probe of a shared prompt is served from cache."""
    engine = ExtractingGenerator()
    engine.warm("<system>Answer.</system>")
    first = engine.probe("<system>Answer.</system><user>[1] K2 is high. How high is K2?</user>")
    again = engine.probe("<system>Answer.</system><user>[1] K2 is high. How tall is K2?</user>")
    assert again.cached_tokens > first.cached_tokens


def test_every_probe_finds_only_the_warmed_prefix_cached(setup: SweepSetup, tmp_path: Path) -> None:
    config, components = setup
    # Two more questions on K2 (the same leading passage) and one asked twice (the same whole prompt).
    shared = [
        *TINY_QUESTIONS,
        {"id": "q5", "question": "What is the height of K2?", "answers": ["8,611 metres"], "gold_doc_ids": ["K2"]},
        {"id": "q6", "question": "How high is K2?", "answers": ["8,611 metres"], "gold_doc_ids": ["K2"]},
    ]
    config = config.model_copy(update={"questions_path": write_jsonl(tmp_path / "shared.jsonl", shared)})
    engine = ExtractingGenerator()
    run_sweep(config, components(engine))
    with duckdb.connect(str(config.store_path), read_only=True) as con:
        warm = con.execute("SELECT warm_cached_tokens FROM runs").fetchone()[0]
        probes = con.execute(
            "SELECT setting_name, question_id, probe_cached_tokens FROM samples WHERE probe_ttft_s IS NOT NULL"
        ).fetchall()
    assert len(probes) == len(config.grid.expand()) * len(shared)
    assert warm > 0 and {cached for _, _, cached in probes} == {warm}
    assert engine.resets >= len(probes)  # one reset before every probe
