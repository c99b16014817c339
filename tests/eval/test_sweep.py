"""The sweep's structure with fake backends: rows, reuse, failure rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import duckdb
import pytest

from corpus.models import Hit
from eval.engine.generator import Generation, GeneratorConfig, Schemas
from eval.run.sweep import run_sweep
from eval.run.wiring import Components
from eval.settings import GridConfig, Setting, SweepConfig
from tests.fakes import ExtractingGenerator, HalvingCompressor
from tests.helpers import SweepSetup


def test_one_row_per_question_and_setting_with_scores(setup: SweepSetup) -> None:
    config, components = setup
    comps = components()
    # The answers phase alone (the latency phase reranks every slot anew: tests/eval/test_latency.py).
    result = run_sweep(config.model_copy(update={"probe_questions": 0}), comps)
    con = duckdb.connect(result.store_path)
    assert con.execute("SELECT count(*), count(DISTINCT (question_id, setting_hash)) FROM samples").fetchone() == (
        16,
        16,
    )
    assert con.execute("SELECT count(*) FROM samples WHERE status = 'ok'").fetchone()[0] == 16
    lo, hi = con.execute("SELECT min(answer_token_recall), max(context_answer_recall) FROM samples").fetchone()
    assert 0.0 <= lo and hi <= 1.0
    assert con.execute("SELECT status, n_questions, n_settings FROM runs").fetchone() == ("ok", 4, 4)
    # The fake answers with the first passage's first clause: right for Asia.
    assert con.execute(
        "SELECT bool_and(answer_contains = 1) FROM samples WHERE question_id='q2' AND compressor='none'"
    ).fetchone()[0]
    # Rerank once per question, shared by all four settings; one generation batch per setting.
    assert comps.rerankers["dense"].calls == 4
    assert len(comps.generator.batches) == 4
    # Every prompt starts with the warmed stable prefix and reports it cached.
    assert con.execute("SELECT min(cached_tokens) > 0 FROM samples").fetchone()[0]
    ratios = con.execute("SELECT realized_ratio FROM v_leaderboard WHERE compressor='halving'").fetchall()
    assert all(1.5 < r[0] <= 2.5 for r in ratios)


def test_every_stage_that_starts_also_finishes(setup: SweepSetup) -> None:
    """A stage that reports 0/N when it starts reports N/N when it ends: its progress bar fills and, without a
    terminal, its heartbeat stops (a finished setting was logged 'after 123 s' forever otherwise)."""
    config, components = setup
    ticks: list[tuple[str, int, int]] = []
    run_sweep(config, components(), progress=lambda stage, done, total: ticks.append((stage, done, total)))
    started = {s for s, done, total in ticks if total and done == 0}
    finished = {s for s, done, total in ticks if total and done >= total}
    assert started and started <= finished
    assert sum(s.startswith("setting ") for s in finished) == 4


def test_failed_compression_is_a_failed_row_not_a_gap(setup: SweepSetup) -> None:
    config, components = setup
    tolerant = config.model_copy(update={"max_failed_fraction": 0.5})  # 1 of 4 failed: tolerated here
    result = run_sweep(tolerant, components(halving=HalvingCompressor(fail_on="K2")))
    con = duckdb.connect(result.store_path)
    rows = con.execute(
        "SELECT status, error, answer_contains FROM samples WHERE question_id='q1' AND compressor='halving'"
    ).fetchall()
    assert rows == [("failed", "compress: cannot compress this one", None)] * 2
    assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 16


def test_a_dead_engine_fails_the_run_loudly_keeps_its_rows_and_a_resume_recomputes(setup: SweepSetup) -> None:
    from eval.run.sweep import SettingFailed

    config, components = setup
    with pytest.raises(SettingFailed, match=r"setting none-k1-hybrid-dense: 4 of 4 samples failed .*engine died"):
        run_sweep(config, components(generator=ExtractingGenerator(fail=True)))
    con = duckdb.connect(str(config.store_path))
    status, error = con.execute("SELECT status, error FROM runs").fetchone()
    assert status == "failed" and "4 of 4 samples failed" in error  # not "ok": the reason is on the run
    # The dead setting's rows stay for diagnosis; no later setting ran on the dead engine.
    assert con.execute("SELECT count(*), bool_and(status = 'failed') FROM samples").fetchone() == (4, True)
    con.close()
    again = run_sweep(config, components())  # the engine is back: the same run resumes
    assert again.resumed and again.settings_computed == len(config.grid.expand())
    con = duckdb.connect(again.store_path)
    assert con.execute("SELECT count(*), count(*) FILTER (WHERE status = 'ok') FROM samples").fetchone() == (16, 16)
    assert con.execute("SELECT count(*), any_value(status) FROM runs").fetchone() == (1, "ok")


def test_retrieval_modes_are_settings_retrieved_once_per_question_and_mode(setup: SweepSetup) -> None:
    config, components = setup
    comps = components()
    calls: list[tuple[str, str]] = []
    real = comps.retriever.retrieve

    def counting(question: str, n: int, mode: str = "hybrid") -> list[Hit]:
        calls.append((question, mode))
        return real(question, n, mode)

    comps.retriever.retrieve = counting  # type: ignore[method-assign]
    grid = config.grid.model_copy(update={"retrievals": ["hybrid", "vector", "fts"]})
    result = run_sweep(config.model_copy(update={"grid": grid, "probe_questions": 0}), comps)  # answers only
    assert sorted(calls) == sorted({(q, m) for q, _ in calls for m in ("hybrid", "vector", "fts")})
    assert len(calls) == 4 * 3
    con = duckdb.connect(result.store_path)
    rows = con.execute("SELECT retrieval, count(*) FROM samples GROUP BY 1 ORDER BY 1").fetchall()
    assert rows == [("fts", 16), ("hybrid", 16), ("vector", 16)]
    k2 = con.execute(
        "SELECT retrieval, gold_rank, retrieval_recall FROM samples WHERE question_id = 'q1' "
        "AND compressor = 'none' AND top_k = 3 ORDER BY 1"
    ).fetchall()
    assert [r[1] for r in k2] == [1, 1, 1] and all(r[2] == 1.0 for r in k2)
    recall = con.execute("SELECT min(retrieval_recall), max(candidate_recall) FROM v_leaderboard").fetchone()
    assert 0.0 < recall[0] <= recall[1] <= 1.0


def test_retrieval_scores() -> None:
    from corpus.models import Hit
    from eval.run.scoring import retrieval_scores

    hits = [Hit(chunk_id=str(i), doc_id=d, title="", text="", score=0.0) for i, d in enumerate("abcab")]
    assert retrieval_scores(hits, ["c"], 2) == {"gold_rank": 3, "retrieval_recall": 0.0, "candidate_recall": 1.0}
    assert retrieval_scores(hits, ["b", "z"], 2) == {"gold_rank": 2, "retrieval_recall": 0.5, "candidate_recall": 0.5}
    assert retrieval_scores(hits, [], 2) == {"gold_rank": None, "retrieval_recall": None, "candidate_recall": None}


def test_a_rerun_builds_models_only_for_the_settings_it_computes(
    setup: SweepSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    import eval.run.sweep as sweep_module

    config, _ = setup
    built: list[list[str]] = []
    real = sweep_module.build_components

    digests: list[str | None] = []

    def recording(config: SweepConfig, settings: list[Setting], corpus_sha256: str | None = None) -> Components:
        built.append(sorted(s.compressor for s in settings))
        digests.append(corpus_sha256)  # the run's digest, handed over: not computed a second time
        return real(config, settings, corpus_sha256)

    monkeypatch.setattr(sweep_module, "build_components", recording)
    # No latency phase here: it measures reused settings too, so it loads their models (test_latency.py).
    named = config.model_copy(
        update={"embedder": "hash", "generator": GeneratorConfig(name="fake"), "probe_questions": 0}
    )
    none_only = named.model_copy(update={"grid": GridConfig(compressions=[{"compressor": "none"}], top_ks=[1])})
    halving = {"compressor": "halving", "target_ratio": 2}
    both = named.model_copy(update={"grid": GridConfig(compressions=[{"compressor": "none"}, halving], top_ks=[1])})
    first = run_sweep(none_only)
    second = run_sweep(both)  # the "none" setting is reused: the models are built for "halving" alone
    third = run_sweep(both)  # everything reused: no model is built
    assert (first.settings_computed, second.settings_computed, third.settings_computed) == (1, 1, 0)
    assert (second.settings_reused, third.settings_reused) == (1, 2)
    assert built == [["none"], ["halving"]]
    con = duckdb.connect(third.store_path, read_only=True)
    stored = {r[0] for r in con.execute("SELECT corpus_sha256 FROM runs").fetchall()}
    assert len(stored) == 1 and digests == [*stored, *stored] and None not in digests
    assert con.execute("SELECT count(*) FROM samples WHERE run_id = ?", [third.run_id]).fetchone() == (8,)
    assert con.execute("SELECT status FROM runs WHERE run_id = ?", [third.run_id]).fetchone() == ("ok",)


def test_preflight_names_what_the_grid_needs_before_any_model_loads(setup: SweepSetup, tmp_path: Path) -> None:
    from corpus.errors import CribsheetError
    from eval.run.preflight import check_sweep
    from eval.settings import CompressionSpec, GridConfig

    config, _ = setup
    check_sweep(config)  # the fixture's inputs are fine
    grid = GridConfig(compressions=[CompressionSpec(compressor="pruned", target_ratio=4)])
    pruned = config.model_copy(update={"grid": grid})
    with pytest.raises(CribsheetError, match="compressor 'pruned' needs sentence vectors in the index"):
        check_sweep(pruned)
    with pytest.raises(CribsheetError, match="no index here"):
        check_sweep(config.model_copy(update={"index_path": tmp_path / "nowhere"}))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "q1", "question": "?", "answers": ["a"]}\n{"id": "q2"\n')
    with pytest.raises(CribsheetError, match="bad.jsonl:2: invalid JSON"):
        check_sweep(config.model_copy(update={"questions_path": bad}))


def test_an_engine_batch_reports_each_finished_request_to_the_progress(setup: SweepSetup) -> None:
    """One engine batch can run for minutes: a generator that reports finished requests moves the command's
    progress inside the batch, under a stage of its own, and is left silent afterwards."""

    class Reporting(ExtractingGenerator):
        batch_progress: Callable[[int, int], None] | None = None

        def generate(self, prompts: Sequence[str], json_schema: Schemas = None) -> list[Generation]:
            outs = super().generate(prompts, json_schema)
            for i in range(len(prompts)):
                if self.batch_progress is not None:
                    self.batch_progress(i + 1, len(prompts))
            return outs

    config, components = setup
    generator = Reporting()
    ticks: list[tuple[str, int, int]] = []
    run_sweep(config, components(generator=generator), progress=lambda s, d, t: ticks.append((s, d, t)))
    batches = [t for t in ticks if t[0].startswith("generate ")]
    n = len(generator.batches[0])
    names = {t[0] for t in batches}
    assert len(names) == len(config.grid.expand()) and n > 1
    assert [d for s, d, _ in batches if s == sorted(names)[0]] == list(range(1, n + 1))
    assert generator.batch_progress is None


def test_a_setting_larger_than_a_block_is_set_aside_block_by_block_and_stored_whole(
    setup: SweepSetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks of two questions (a spill file each setting) store the rows one block of all questions stores,
    in one transaction per setting; a setting that fails in its second block stores nothing of itself."""
    import eval.run.runner as runner

    config, components = setup
    config = config.model_copy(update={"probe_questions": 0})
    whole = run_sweep(config, components(), reuse=False)
    monkeypatch.setattr(runner, "BLOCK_QUESTIONS", 2)
    spilled = config.model_copy(update={"store_path": tmp_path / "spilled.duckdb"})
    blocks = run_sweep(spilled, components(), reuse=False)

    def answers(path: Path, run_id: str) -> list[tuple[object, ...]]:
        with duckdb.connect(str(path), read_only=True) as con:
            return con.execute(
                "SELECT setting_hash, question_id, answer, context_text, faithfulness, status FROM samples "
                "WHERE run_id = ? ORDER BY 1, 2",
                [run_id],
            ).fetchall()

    n_questions = len(answers(config.store_path, whole.run_id)) // len(config.grid.expand())
    assert n_questions > 2  # more than one block
    assert answers(spilled.store_path, blocks.run_id) == answers(config.store_path, whole.run_id)

    class DiesInSecondBlock(ExtractingGenerator):
        def generate(self, prompts: Sequence[str], json_schema: Schemas = None) -> list[Generation]:
            if len(self.batches) == 1:
                raise KeyboardInterrupt  # the process is stopped mid-setting
            return super().generate(prompts, json_schema)

    killed = config.model_copy(update={"store_path": tmp_path / "killed.duckdb"})
    with pytest.raises(KeyboardInterrupt):
        run_sweep(killed, components(generator=DiesInSecondBlock()), reuse=False)
    with duckdb.connect(str(killed.store_path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM samples").fetchone() == (0,)
