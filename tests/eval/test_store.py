"""The results store: schema from row models, append-only migrations, transactions, NULLs, locking, crash."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from corpus.errors import CribsheetError
from eval.store import SCHEMA_VERSION, TABLES, DuckDBStore, SampleRow, columns
from eval.store.rows import ClaimRow, SettingRow
from tests.helpers import run_row, sample_row

ROOT = Path(__file__).resolve().parents[2]


def _claim(qid: str) -> ClaimRow:
    return ClaimRow(
        run_id="r1",
        setting_hash="sh",
        question_id=qid,
        claim_idx=0,
        claim="c",
        best_span="s",
        lexical=1.0,
        semantic=0.9,
        numbers_ok=True,
        names_ok=True,
        supported=True,
    )


def test_tables_follow_row_models_and_schema_is_versioned(tmp_path: Path) -> None:
    DuckDBStore(tmp_path / "r.duckdb")
    con = duckdb.connect(str(tmp_path / "r.duckdb"))
    for table, model in TABLES.items():
        cols = con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name=? ORDER BY ordinal_position", [table]
        ).fetchall()
        assert [c[0] for c in cols] == [n for n, _ in columns(model)]
    assert con.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION


def test_old_table_gets_new_columns_appended(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE samples (run_id VARCHAR, question_id VARCHAR)")
    con.execute("INSERT INTO samples VALUES ('old', 'q')")
    con.close()
    store = DuckDBStore(path)
    names = [r["column_name"] for r in store.query("DESCRIBE samples")]
    assert names[:2] == ["run_id", "question_id"] and "faithfulness" in names
    assert store.query("SELECT count(*) AS n FROM samples WHERE run_id='old'")[0]["n"] == 1


def test_failed_insert_rolls_back_samples_and_claims_together(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "r.duckdb")
    store.start_run(run_row())
    store.add_samples([sample_row("q1")], [_claim("q1")])
    bad = sample_row("q3").model_copy(update={"top_k": "not a number"})
    with pytest.raises(duckdb.Error):
        store.add_samples([sample_row("q2"), bad], [_claim("q2")])
    assert store.query("SELECT list(question_id) AS q FROM samples")[0]["q"] == ["q1"]
    assert store.query("SELECT list(question_id) AS q FROM claims")[0]["q"] == ["q1"]


def test_missing_values_are_null_and_views_ignore_them(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "r.duckdb")
    store.start_run(run_row())
    store.add_samples(
        [
            sample_row(
                "q1",
                answer_contains=1.0,
                answer_token_recall=1.0,
                ttft_s=0.05,
                e2e_cold_s=0.4,
                context_tokens_in=100,
                context_tokens_out=25,
            ),
            sample_row("q2", status="failed", error="compress: boom"),
            sample_row("q1", setting="fast", answer_contains=1.0, answer_token_recall=1.0, ttft_s=0.1, e2e_cold_s=0.2),
            sample_row("q2", setting="fast", answer_contains=0.0, answer_token_recall=0.0, ttft_s=0.1, e2e_cold_s=0.2),
            sample_row("q1", setting="slow", answer_contains=0.5, answer_token_recall=0.5, ttft_s=0.01, e2e_cold_s=0.9),
        ]
    )
    assert store.query("SELECT count(*) AS n FROM samples WHERE answer_contains IS NULL")[0]["n"] == 1
    board = {r["setting_hash"]: r for r in store.leaderboard("r1")}
    row = board["sh"]
    assert (row["n"], row["n_failed"], row["answer_contains"], row["realized_ratio"]) == (2, 1, 1.0, 4.0)
    assert not any(isinstance(v, float) and math.isnan(v) for r in board.values() for v in r.values())
    pareto = {r["setting_hash"] for r in store.query("SELECT setting_hash FROM v_pareto")}
    # sh is better on token recall, fast end to end; slow has the best batch TTFT, not a latency verdict.
    assert pareto == {"sh", "fast"}
    diff = store.query(
        "SELECT * FROM v_sample_diff WHERE a_setting LIKE '%-sh' AND b_setting LIKE '%-fast' AND question_id='q1'"
    )
    assert len(diff) == 1 and diff[0]["answer_contains_diff"] == 0.0


def test_export_parquet_writes_every_table(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "r.duckdb")
    store.start_run(run_row())
    store.add_samples([sample_row("q1")], [_claim("q1")])
    written = store.export_parquet(tmp_path / "export")
    assert sorted(p.name for p in written) == sorted(f"{t}.parquet" for t in TABLES)
    assert duckdb.sql(f"SELECT count(*) FROM '{tmp_path / 'export' / 'samples.parquet'}'").fetchall() == [(1,)]


def test_store_opens_in_the_duckdb_shell(tmp_path: Path) -> None:
    shell = Path(sys.executable).with_name("duckdb")
    if not shell.exists():
        shell = Path(shutil.which("duckdb") or "duckdb")
    store = DuckDBStore(tmp_path / "r.duckdb")
    store.start_run(run_row())
    store.add_samples([sample_row("q1", answer_contains=1.0)])
    proc = subprocess.run(
        [str(shell), "-csv", str(tmp_path / "r.duckdb"), "select setting_name, n from v_leaderboard"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["setting_name,n", "none-k3-sh,1"]


def _hold_lock(path: Path, seconds: float) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import duckdb, sys, time
        con = duckdb.connect({str(path)!r})
        con.execute("BEGIN"); con.execute("INSERT INTO samples (run_id, question_id) VALUES ('x', 'x')")
        print("locked", flush=True); time.sleep({seconds})
        con.execute("COMMIT")
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_second_writer_waits_then_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "r.duckdb"
    DuckDBStore(path)
    holder = _hold_lock(path, 1.5)
    try:
        with pytest.raises(CribsheetError, match=r"r\.duckdb: results store is in use by another process"):
            DuckDBStore(path, lock_timeout_s=0.2)
        store = DuckDBStore(path, lock_timeout_s=30)  # waits for the holder to finish ...
        assert store.query("SELECT count(*) AS n FROM samples")[0]["n"] == 1  # ... and sees what it committed
    finally:
        holder.wait(timeout=30)


def test_killed_sweep_leaves_only_complete_settings(tmp_path: Path, tiny_corpus: Path, tiny_questions: Path) -> None:
    """SIGKILL in the middle of a sweep: the file opens, and holds whole settings only."""
    store = tmp_path / "r.duckdb"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from corpus.chunk import SentenceChunker
        from tests.fakes import HashEmbedder
        from corpus.index import sync_index
        from tests.helpers import load_documents, run_row
        from corpus.retrieve import LanceRetriever
        from eval.compress import NoCompressor
        from eval.rerank import DenseReranker
        from eval.settings import GridConfig, SweepConfig
        from eval.run.wiring import Components
        from eval.run.sweep import run_sweep
        from tests.fakes import ExtractingGenerator, count_words

        class SlowGenerator(ExtractingGenerator):
            def generate(self, prompts):
                out = super().generate(prompts)
                print("batch", len(self.batches), flush=True)
                if len(self.batches) >= 2:
                    time.sleep(60)  # killed here, between settings
                return out

        index = Path({str(tmp_path / "idx.lancedb")!r})
        emb = HashEmbedder()
        sync_index(load_documents(Path({str(tiny_corpus)!r})), SentenceChunker(), emb, index)
        comps = Components(embedder=emb, retriever=LanceRetriever(index, emb),
                           rerankers={{"dense": DenseReranker(emb)}},
                           compressors={{"none": NoCompressor(count_words)}}, generator=SlowGenerator())
        config = SweepConfig(index_path=index, questions_path=Path({str(tiny_questions)!r}),
                             store_path=Path({str(store)!r}), embedder="hash", grid=GridConfig(
                                 compressions=[{{"compressor": "none"}}], top_ks=[1, 2, 3]))
        run_sweep(config, comps)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    while proc.stdout.readline().strip() != "batch 2":
        pass
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    con = duckdb.connect(str(store), read_only=True)
    per_setting = con.execute("SELECT setting_name, count(*) FROM samples GROUP BY 1").fetchall()
    assert per_setting and all(n == 4 for _, n in per_setting) and len(per_setting) == 1
    assert con.execute("SELECT status FROM runs").fetchone()[0] == "running"


def test_every_setting_field_is_a_column() -> None:
    """Rows take the setting's fields by name; a new Setting field without a column would be dropped silently."""
    from eval.settings import Setting
    from eval.store.rows import SampleRow, SettingRow

    assert set(Setting.model_fields) <= set(SettingRow.model_fields)
    assert set(Setting.model_fields) <= set(SampleRow.model_fields)


def test_columns_are_only_ever_appended() -> None:
    """Every column of the frozen snapshot is still there, in the same place; new ones only at the end."""
    snapshot = json.loads((Path(__file__).resolve().parents[1] / "data" / "schema_columns.json").read_text())
    for table, model in TABLES.items():
        names = [n for n, _ in columns(model)]
        assert names[: len(snapshot.get(table, []))] == snapshot.get(table, []), table  # a new table: no snapshot
    from eval.store import schema_version

    assert SCHEMA_VERSION == schema_version() >= sum(len(c) for c in snapshot.values())


def test_opening_to_read_never_migrates(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE samples (run_id VARCHAR, question_id VARCHAR)")
    con.close()
    reader = DuckDBStore(path, read_only=True)
    assert [r["column_name"] for r in reader.query("DESCRIBE samples")] == ["run_id", "question_id"]
    assert reader.query("SELECT count(*) AS n FROM information_schema.tables WHERE table_name='runs'")[0]["n"] == 0
    with pytest.raises(CribsheetError, match="read-only"):
        reader.add_samples([sample_row("q1")])
    with pytest.raises(CribsheetError, match="no results store here"):
        DuckDBStore(tmp_path / "missing.duckdb", read_only=True)
    assert not (tmp_path / "missing.duckdb").exists()


def test_read_api_resolves_settings_pairs_samples_and_reads_runs(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "r.duckdb")
    store.start_run(
        run_row(),
        [
            SettingRow(
                run_id="r1",
                setting_hash="sh",
                setting_name="none-k3",
                setting_json="{}",
                top_k=3,
                retrieval="hybrid",
                reranker="dense",
                compressor="none",
                target_ratio=1.0,
                layout="ranked",
            )
        ],
    )
    store.add_samples([sample_row("q1", answer_contains=1.0), sample_row("q2", answer_contains=0.0)])
    reader = DuckDBStore(tmp_path / "r.duckdb", read_only=True)
    ref = reader.resolve_setting("none-k3")
    assert ref == reader.resolve_setting("sh", run="r1") and ref.run_id == "r1"
    base, cand = reader.paired_samples(ref, ref)
    assert sorted(base) == ["q1", "q2"] and base["q1"]["answer_contains"] == 1.0 and base == cand
    meta = reader.run_meta("r1")
    assert meta.status == "running" and meta.questions_sha256 == run_row().questions_sha256
    with pytest.raises(CribsheetError, match="setting 'nope' not found in any run; known: none-k3"):
        reader.resolve_setting("nope")
    with pytest.raises(CribsheetError, match="no run 'r9'"):
        reader.run_meta("r9")
    with pytest.raises(CribsheetError, match=r"unknown runs column\(s\) \['finshed'\]"):
        store.finish_run("r1", "ok", finshed=True)


def test_the_latest_run_is_the_latest_with_rows_not_one_that_failed_before_its_first_setting(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "r.duckdb")
    assert store.latest_run() is None
    store.start_run(run_row("r1"), [])
    assert store.latest_run() == "r1"  # no run has rows yet: the latest one
    store.add_samples([sample_row("q1")])
    later = run_row("r2").model_copy(update={"started_at": dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)})
    store.start_run(later, [])
    store.finish_run("r2", "failed")
    assert store.latest_run() == "r1"
    store.add_samples([sample_row("q1").model_copy(update={"run_id": "r2"})])
    assert store.latest_run() == "r2"  # both have rows: the later one


def test_every_stored_column_is_documented() -> None:
    from eval.store import TABLES, columns

    text = (Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text()
    missing = [f"{t}.{c}" for t, m in TABLES.items() for c, _ in columns(m) if c not in text]
    assert missing == []


def test_samples_have_one_row_per_run_setting_and_question(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "r.duckdb")
    store.start_run(run_row())
    store.add_samples([sample_row("q1"), sample_row("q2")])
    store.add_samples([sample_row("q1", answer="again")])  # a setting written again replaces its rows
    assert store.query("SELECT question_id, answer FROM samples ORDER BY 1") == [
        {"question_id": "q1", "answer": "again"}
    ]
    with pytest.raises(duckdb.ConstraintException, match="(?i)duplicate key"):
        store.add_samples([sample_row("q1"), sample_row("q1")])  # never two rows for one question of one setting
    assert store.query("SELECT count(*) AS n FROM samples")[0]["n"] == 1  # and the failed write left nothing


def test_a_silent_run_is_taken_over_from_any_host_and_its_old_owner_writes_nothing(tmp_path: Path) -> None:
    from eval.run.resume import claim_run
    from eval.store.lifecycle import RunTakenOver

    path = tmp_path / "r.duckdb"
    silent = run_row("silent").model_copy(update={"fingerprint": "f", "pid": 4242, "host": "a-container-that-is-gone"})
    DuckDBStore(path).start_run(silent)  # running, no heartbeat since it started
    newcomer = run_row("new").model_copy(update={"fingerprint": "f", "pid": 1, "host": "here"})
    with pytest.raises(CribsheetError, match="over the same inputs is still running"):
        claim_run(DuckDBStore(path), newcomer, [], [], stale_after_s=3600)  # not silent for long enough
    claim = claim_run(DuckDBStore(path), newcomer, [], [], stale_after_s=0)
    assert claim.run_id == "silent" and claim.resumed
    row = DuckDBStore(path, read_only=True).query("SELECT status, pid, host, taken_over_from, resumes FROM runs")
    assert row == [
        {
            "status": "running",
            "pid": 1,
            "host": "here",
            "taken_over_from": "4242@a-container-that-is-gone",
            "resumes": 1,
        }
    ]
    with pytest.raises(RunTakenOver):  # the old owner wakes up: nothing it writes lands
        DuckDBStore(path).add_samples(
            [sample_row("q1").model_copy(update={"run_id": "silent"})], owner=(4242, "a-container-that-is-gone")
        )
    assert DuckDBStore(path).query("SELECT count(*) AS n FROM samples")[0]["n"] == 0
    with pytest.raises(RunTakenOver, match="run silent is no longer this process's"):
        DuckDBStore(path).heartbeat("silent", 4242, "a-container-that-is-gone")
    DuckDBStore(path).heartbeat("silent", 1, "here")  # the new owner beats


def test_a_taken_over_runs_old_owner_can_neither_close_it_nor_copy_into_it(tmp_path: Path) -> None:
    """A process frozen past the takeover timeout wakes up and fails: its close and its reuse copy are
    refused, and the row and samples its successor wrote are left exactly as they were."""
    from eval.run.resume import claim_run
    from eval.store.lifecycle import RunTakenOver

    path = tmp_path / "r.duckdb"
    old, new = (4242, "frozen-laptop"), (1, "here")
    silent = run_row("silent").model_copy(update={"fingerprint": "f", "pid": old[0], "host": old[1]})
    store = DuckDBStore(path)
    store.start_run(silent)
    store.start_run(run_row("source"))  # an earlier run whose setting could be reused
    store.add_samples([sample_row("q1", "reused").model_copy(update={"run_id": "source"})])
    taker = run_row("taker").model_copy(update={"fingerprint": "f", "pid": new[0], "host": new[1]})
    assert claim_run(store, taker, [], [], stale_after_s=0).run_id == "silent"
    store.add_samples([sample_row("q1", answer="the new owner's").model_copy(update={"run_id": "silent"})], owner=new)

    def state() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        run = store.query(
            "SELECT status, pid, host, finished_at, error, heartbeat_at FROM runs WHERE run_id = 'silent'"
        )
        rows = store.query("SELECT setting_hash, question_id, answer FROM samples WHERE run_id = 'silent' ORDER BY 1")
        return run, rows

    before = state()
    with pytest.raises(RunTakenOver, match="it was taken over"):
        store.finish_run("silent", "failed", owner=old, error="RuntimeError: engine died")
    with pytest.raises(RunTakenOver, match="running, held by process 1 on here"):
        store.copy_setting("source", "silent", "reused", owner=old)
    with pytest.raises(RunTakenOver):
        store.heartbeat("silent", *old)
    assert state() == before and before[0][0]["status"] == "running"

    assert store.copy_setting("source", "silent", "reused", owner=new) == 1  # the owner may do all of it
    store.finish_run("silent", "ok", owner=new)
    with pytest.raises(RunTakenOver, match="the run is now ok"):  # a closed run is no one's to close again
        store.finish_run("silent", "failed", owner=new)
    assert store.query("SELECT status, error FROM runs WHERE run_id = 'silent'") == [{"status": "ok", "error": None}]


def test_break_even_view_predicts_a_linear_run_exactly_and_says_where_each_compressor_pays(tmp_path: Path) -> None:
    """Probes whose TTFT is exactly i + s*C: the view's prediction equals the measured speed-up, and the
    2x length is where the formula says; a compressor that costs more than the prefill it saves never pays."""
    store = DuckDBStore(tmp_path / "r.duckdb")
    store.start_run(run_row())
    i, s, rr, h = 0.05, 0.001, 0.02, 100  # TTFT intercept, seconds per token, retrieve + rerank, other tokens

    def probe(qid: str, setting: str, compressor: str, context: int, ratio: float, k: float) -> SampleRow:
        out = round(context / ratio)
        cold = k * context
        return sample_row(
            qid,
            setting,
            setting_name=f"{compressor}-{setting}",
            compressor=compressor,
            target_ratio=ratio,
            top_k=8,
            context_tokens_in=context,
            context_tokens_out=out,
            prompt_tokens=out + h,
            probe_cached_tokens=0,
            probe_ttft_s=i + s * (out + h),
            compress_cold_seconds=cold,
            e2e_cold_s=rr + cold + i + s * (out + h),
        )

    contexts = [800, 1000, 1200, 1400]
    store.add_samples([probe(f"q{n}", "base", "none", c, 1.0, 0.0) for n, c in enumerate(contexts)])
    store.add_samples([probe(f"q{n}", "cheap", "pruned", c, 4.0, 0.00005) for n, c in enumerate(contexts)])
    store.add_samples([probe(f"q{n}", "dear", "llmlingua", c, 4.0, 0.002) for n, c in enumerate(contexts)])
    rows = {r["compressor"]: r for r in store.query("SELECT * FROM v_break_even")}
    assert set(rows) == {"pruned", "llmlingua"}
    cheap, dear = rows["pruned"], rows["llmlingua"]
    assert cheap["ttft_s_per_1k"] == pytest.approx(1000 * s) and cheap["ttft_intercept_s"] == pytest.approx(i)
    assert cheap["ttft_s_per_1k_squared"] == pytest.approx(0.0, abs=1e-9) and cheap[
        "retrieve_rerank_s"
    ] == pytest.approx(rr)
    for row in (cheap, dear):
        assert row["predicted_speedup"] == pytest.approx(row["measured_speedup"], rel=1e-6)
    assert cheap["break_even_tokens"] == 100.0 and cheap["predicted_speedup"] > 2.0  # pays from the grid's start
    o, k, r = i + rr, 0.00005, 4.0
    exact = (o + s * h) / (s - 2 * k - 2 * s / r)  # S(C) = 2 solved for a straight line
    assert cheap["two_x_tokens"] == math.ceil(exact / 100) * 100
    assert dear["predicted_speedup"] < 1.0 and dear["break_even_tokens"] is None and dear["two_x_tokens"] is None


def test_the_largest_losses_of_a_cross_run_decision_show_each_runs_own_answers(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "r.duckdb")
    for run_id, setting, answer, recall in (("r1", "base", "old run", 1.0), ("r2", "cand", "new run", 0.0)):
        store.start_run(run_row(run_id))
        store.add_samples(
            [sample_row("q1", setting, run_id=run_id, answer=answer, answer_token_recall=recall, context_tokens_out=9)]
        )
    store.add_samples([sample_row("q1", "cand", run_id="r1", answer="same run", answer_token_recall=1.0)])
    (loss,) = store.largest_losses("r1", "base", "r2", "cand")
    assert (loss["baseline_answer"], loss["candidate_answer"], loss["diff"]) == ("old run", "new run", -1.0)
    assert store.largest_losses("r1", "base", "r1", "cand") == []  # within r1 the candidate lost nothing


def test_the_largest_losses_of_a_sequential_decision_read_every_batch_run(tmp_path: Path) -> None:
    """A sequential gate's decision names its last batch run; its losses come from every batch it swept."""
    store = DuckDBStore(tmp_path / "r.duckdb")
    for run_id, question, lost in (("b1", "q1", True), ("b2", "q2", False)):
        store.start_run(run_row(run_id))
        store.add_samples(
            [
                sample_row(question, "base", run_id=run_id, answer="right", answer_token_recall=1.0),
                sample_row(question, "cand", run_id=run_id, answer="wrong", answer_token_recall=0.0 if lost else 1.0),
            ]
        )
    assert store.largest_losses("b2", "base", "b2", "cand") == []  # the last batch alone lost nothing
    (loss,) = store.largest_losses(["b1", "b2"], "base", ["b1", "b2"], "cand")  # q1, lost in the first batch
    assert loss["diff"] == -1.0


def test_the_agreement_views_kappa_is_the_one_cohen_kappa_computes(tmp_path: Path) -> None:
    """Cohen's kappa is computed twice: in Python for a run (`runs.judge_kappa`, `runs.verifier_kappa`) and
    in SQL per setting (`v_judge_agreement`, `v_verifier_agreement`). On yes/no verdicts the two agree,
    undefined (chance agreement 1) included."""
    from eval.metrics import cohen_kappa

    verdicts = {
        "mixed": [(True, True)] * 6 + [(True, False)] * 3 + [(False, False)] * 4 + [(False, True)] * 2,
        "opposed": [(True, False), (False, True)] * 2,
        "one-label": [(True, True)] * 3,
    }
    store = DuckDBStore(tmp_path / "r.duckdb")
    store.start_run(run_row())
    claims = [
        _claim(f"{setting}-{i}").model_copy(
            update={"setting_hash": setting, "supported": checker, "judge_supported": other,
                    "model_supported": other, "model_prob": 0.9 if other else 0.1}
        )
        for setting, pairs in verdicts.items()
        for i, (checker, other) in enumerate(pairs)
    ]  # fmt: skip
    store.add_samples([], claims)
    for view in ("v_judge_agreement", "v_verifier_agreement"):
        kappa = {r["setting_hash"]: r["kappa"] for r in store.query(f"SELECT setting_hash, kappa FROM {view}")}
        assert kappa.keys() == verdicts.keys()
        for setting, pairs in verdicts.items():
            expected = cohen_kappa(pairs)
            assert kappa[setting] == (pytest.approx(expected) if expected is not None else None), (view, setting)
    assert cohen_kappa(verdicts["opposed"]) == pytest.approx(-1.0)  # the cases differ from one another
