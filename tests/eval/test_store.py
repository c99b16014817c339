import datetime as dt
import math
from pathlib import Path

import duckdb
import pytest

from eval.store import SCHEMA_VERSION, DuckDBStore, RunRow, SampleRow, columns


def _run(run_id: str = "r1") -> RunRow:
    return RunRow(
        run_id=run_id,
        started_at=dt.datetime.now(dt.UTC),
        status="running",
        config_json="{}",
        config_hash="h",
        package_versions="{}",
        questions_path="q.jsonl",
        questions_sha256="s",
        index_path="i",
        n_questions=2,
        n_settings=1,
    )


def _sample(qid: str, **kw: object) -> SampleRow:
    base = dict(
        run_id="r1",
        setting_hash="sh",
        setting_name="none-k3-dense",
        setting_json="{}",
        question_id=qid,
        question="?",
        answerable=True,
        gold_answers='["a"]',
        top_k=3,
        reranker="dense",
        compressor="none",
        target_ratio=1.0,
        context_chunk_ids="[]",
        status="ok",
    )
    return SampleRow(**(base | kw))


def test_tables_follow_row_models_and_schema_is_versioned(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "r.duckdb")
    cols = store.con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name='samples' ORDER BY ordinal_position"
    ).fetchall()
    assert [c[0] for c in cols] == [n for n, _ in columns(SampleRow)]
    assert store.con.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION


def test_old_table_gets_new_columns_appended(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE samples (run_id VARCHAR, question_id VARCHAR)")
    con.execute("INSERT INTO samples VALUES ('old', 'q')")
    con.close()
    store = DuckDBStore(path)
    names = [r[0] for r in store.con.execute("DESCRIBE samples").fetchall()]
    assert names[:2] == ["run_id", "question_id"] and "ttft_s" in names
    assert store.con.execute("SELECT count(*) FROM samples WHERE run_id='old'").fetchone()[0] == 1


def test_failed_insert_rolls_back_the_whole_batch(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "r.duckdb")
    store.start_run(_run())
    store.add_samples([_sample("q1")])
    bad = _sample("q3").model_copy(update={"top_k": "not a number"})
    with pytest.raises(duckdb.Error):
        store.add_samples([_sample("q2"), bad])
    assert store.con.execute("SELECT list(question_id) FROM samples").fetchone()[0] == ["q1"]


def test_missing_values_are_null_and_leaderboard_ignores_them(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "r.duckdb")
    store.start_run(_run())
    store.add_samples(
        [
            _sample("q1", answer_contains=1.0, ttft_s=0.2, context_tokens_in=100, context_tokens_out=25),
            _sample("q2", status="failed", error="compress: boom"),
        ]
    )
    (n_null,) = store.con.execute("SELECT count(*) FROM samples WHERE answer_contains IS NULL").fetchone()
    assert n_null == 1
    [row] = store.leaderboard("r1")
    assert (row["n"], row["n_failed"], row["answer_contains"], row["realized_ratio"]) == (2, 1, 1.0, 4.0)
    assert not any(isinstance(v, float) and math.isnan(v) for v in row.values())


def test_store_opens_in_the_duckdb_shell(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    shell = Path(sys.executable).with_name("duckdb")
    if not shell.exists():
        shell = Path(shutil.which("duckdb") or "duckdb")
    store = DuckDBStore(tmp_path / "r.duckdb")
    store.start_run(_run())
    store.add_samples([_sample("q1", answer_contains=1.0)])
    store.close()
    proc = subprocess.run(
        [str(shell), "-csv", str(tmp_path / "r.duckdb"), "select setting_name, n from v_leaderboard"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["setting_name,n", "none-k3-dense,1"]
