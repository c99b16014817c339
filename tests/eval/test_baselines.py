"""A compressed setting's baseline is the same setting without compression: matched on every axis but the
compression ones, in the gate, in `v_break_even` and in the report, with several retrievals and answer
caches in one grid."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from eval.cells import EMPTY
from eval.release_report import BREAK_EVEN, break_even_cells, html_report
from eval.store import DuckDBStore, SampleRow
from eval.store.schema import BASELINE_AXES, COMPRESSION_AXES, VIEWS
from tests.helpers import run_row, sample_row

T0, S, H = 0.05, 0.001, 100  # TTFT intercept, seconds per prompt token, the prompt's other tokens
CONTEXTS = [800, 1000, 1200, 1400]
GROUPS = {  # (retrieval, answer cache): (retrieve + rerank + cache lookup s, context tokens scale)
    ("hybrid", None): (0.02, 1.0),
    ("hybrid", 0.8): (0.03, 1.5),
    ("vector", None): (0.01, 2.0),
    ("vector", 0.8): (0.015, 3.0),
}
K = 0.00005  # the compressor's cold seconds per input token


def _name(compressor: str, retrieval: str, cache: float | None, layout: str = "ranked") -> str:
    comp = "none" if compressor == "none" else f"{compressor}-4x"
    name = f"{comp}-k8-{retrieval}-dense" + ("" if layout == "ranked" else f"-{layout}")
    return name if cache is None else f"{name}-cache{cache:g}"


def _probes(
    compressor: str, retrieval: str, cache: float | None, rr: float, scale: float, k: float, layout: str = "ranked"
) -> list[SampleRow]:
    """One setting's probe rows whose TTFT is exactly T0 + S * prompt tokens (the fit is exact)."""
    ratio = 1.0 if compressor == "none" else 4.0
    name = _name(compressor, retrieval, cache, layout)
    rows = []
    for n, base in enumerate(CONTEXTS):
        context = round(base * scale)
        out = round(context / ratio)
        rows.append(
            sample_row(
                f"q{n}", f"h-{name}", setting_name=name, compressor=compressor, target_ratio=ratio, top_k=8,
                retrieval=retrieval, reranker="dense", layout=layout, output="text", answer_cache=cache,
                context_tokens_in=context, context_tokens_out=out, prompt_tokens=out + H, probe_cached_tokens=0,
                probe_ttft_s=T0 + S * (out + H), compress_cold_seconds=k * context,
                e2e_cold_s=rr + k * context + T0 + S * (out + H),
            )
        )  # fmt: skip
    return rows


def _grid_store(tmp_path: Path) -> DuckDBStore:
    """Every (retrieval, answer cache) group uncompressed and pruned at top-8, plus an llmlingua setting in
    the `edges` layout that has no uncompressed twin and costs more than it saves."""
    store = DuckDBStore(tmp_path / "r.duckdb")
    store.start_run(run_row())
    for (retrieval, cache), (rr, scale) in GROUPS.items():
        store.add_samples(_probes("none", retrieval, cache, rr, scale, 0.0))
        store.add_samples(_probes("pruned", retrieval, cache, rr, scale, K))
    store.add_samples(_probes("llmlingua", "hybrid", None, 0.02, 1.0, 0.002, layout="edges"))
    return store


def _measured(rr: float, scale: float) -> float:
    """Mean e2e_cold_s of the group's uncompressed setting over that of its pruned one."""
    contexts = [round(c * scale) for c in CONTEXTS]
    base = [rr + T0 + S * (c + H) for c in contexts]
    pruned = [rr + K * c + T0 + S * (round(c / 4) + H) for c in contexts]
    return (sum(base) / len(base)) / (sum(pruned) / len(pruned))


def test_the_baseline_axes_are_every_setting_axis_but_the_compression_ones() -> None:
    from eval.settings import Setting

    assert set(BASELINE_AXES) | set(COMPRESSION_AXES) == set(Setting.model_fields)
    assert not set(BASELINE_AXES) & set(COMPRESSION_AXES)


def test_the_views_carry_and_join_on_exactly_the_baseline_axes(tmp_path: Path) -> None:
    """The gate reads the axes from `v_leaderboard`; `v_break_even` pairs and pools on all of them, no other."""
    sql = VIEWS["v_break_even"]
    for alias in ("o", "b"):
        joined = re.findall(rf"c\.(\w+) IS NOT DISTINCT FROM {alias}\.(\w+)", sql)
        assert [a for a, b in joined] == [b for a, b in joined] == list(BASELINE_AXES), alias
    DuckDBStore(tmp_path / "r.duckdb")
    con = duckdb.connect(str(tmp_path / "r.duckdb"), read_only=True)
    for view in ("v_leaderboard", "v_break_even"):
        names = {d[0] for d in con.execute(f"SELECT * FROM {view} LIMIT 0").description}
        assert set(BASELINE_AXES) | set(COMPRESSION_AXES) <= names, view
    assert "baseline_setting" in {d[0] for d in con.execute("SELECT * FROM v_break_even LIMIT 0").description}


def test_break_even_measures_each_compressed_setting_against_its_own_baseline(tmp_path: Path) -> None:
    """Two retrievals × two answer caches in one grid: one row per compressed setting, its measured speed-up
    against the uncompressed setting of its own group, its retrieve + rerank cost its group's own; the
    model then predicts each measured speed-up exactly."""
    rows = _grid_store(tmp_path).break_even("r1")
    assert sorted(r["setting_name"] for r in rows) == sorted(
        [_name("pruned", m, c) for m, c in GROUPS] + [_name("llmlingua", "hybrid", None, "edges")]
    )
    by_name = {r["setting_name"]: r for r in rows}
    expected = {g: _measured(*GROUPS[g]) for g in GROUPS}
    assert len({round(v, 6) for v in expected.values()}) == len(GROUPS)  # a wrong pairing would show
    for (retrieval, cache), (rr, _) in GROUPS.items():
        row = by_name[_name("pruned", retrieval, cache)]
        assert row["baseline_setting"] == _name("none", retrieval, cache)
        assert (row["retrieval"], row["answer_cache"]) == (retrieval, cache)
        assert row["retrieve_rerank_s"] == pytest.approx(rr)
        assert row["measured_speedup"] == pytest.approx(expected[(retrieval, cache)], rel=1e-9)
        assert row["predicted_speedup"] == pytest.approx(row["measured_speedup"], rel=1e-6)
    lone = by_name[_name("llmlingua", "hybrid", None, "edges")]
    assert lone["baseline_setting"] is None and lone["measured_speedup"] is None  # no uncompressed `edges`
    assert lone["predicted_speedup"] < 1.0 and lone["break_even_tokens"] is None


def test_the_report_shows_each_baseline_and_never_a_null(tmp_path: Path) -> None:
    store = _grid_store(tmp_path)
    cells = {r["setting_name"]: dict(zip((k for k, _, _ in BREAK_EVEN), break_even_cells(r), strict=True))
             for r in store.break_even("r1")}  # fmt: skip
    lone = cells[_name("llmlingua", "hybrid", None, "edges")]
    assert lone["baseline_setting"] == lone["measured_speedup"] == EMPTY
    assert lone["break_even_tokens"] == lone["two_x_tokens"] == "never"
    pruned = cells[_name("pruned", "vector", 0.8)]
    assert pruned["baseline_setting"] == _name("none", "vector", 0.8)
    assert pruned["measured_speedup"] == f"{_measured(*GROUPS[('vector', 0.8)]):.2f}x"
    table = html_report(store, "r1").split("Where each compressor pays for itself")[1]
    assert "never" in table and EMPTY in table and _name("none", "vector", 0.8) in table
    assert not re.search(r">(NULL|None|nan)<", table)


def test_a_missing_figure_is_never_printed_as_null_or_nan() -> None:
    row = {k: None for k, _, _ in BREAK_EVEN} | {"setting_name": "x", "measured_speedup": float("nan")}
    cells = break_even_cells(row)
    assert cells[0] == "x" and set(cells[1:]) == {EMPTY, "never"}
