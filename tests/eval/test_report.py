"""The report: frontier, Pareto SVG and markdown bill from leaderboard rows."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET

from eval.release_report import frontier, pareto_svg, points, report_markdown

ROWS = [
    # fast and good: frontier; slow and worse: dominated; slower but better: frontier; no latency: not placed
    {
        "setting_name": "none-k3",
        "e2e_cold_p50_s": 0.5,
        "answer_token_recall": 0.40,
        "answer_token_recall_sd": 0.5,
        "n_answerable": 100,
        "n": 110,
    },
    {
        "setting_name": "llmlingua-4x",
        "e2e_cold_p50_s": 4.9,
        "answer_token_recall": 0.17,
        "answer_token_recall_sd": 0.4,
        "n_answerable": 100,
        "n": 110,
    },
    {
        "setting_name": "none-k8",
        "e2e_cold_p50_s": 1.1,
        "answer_token_recall": 0.45,
        "answer_token_recall_sd": 0.5,
        "n_answerable": 100,
        "n": 110,
    },
    {"setting_name": "a<b&c", "e2e_cold_p50_s": None, "answer_token_recall": 0.3, "n": 110},
]


def test_frontier_keeps_only_undominated_settings() -> None:
    pts = points(ROWS)
    assert [p.name for p in pts] == ["none-k3", "llmlingua-4x", "none-k8"]  # no latency: cannot be placed
    assert frontier(pts) == {"none-k3", "none-k8"}
    assert abs(pts[0].half_width - 1.96 * 0.5 / 10) < 1e-12


def test_pareto_svg_is_valid_xml_with_one_marker_per_setting() -> None:
    import re

    svg = pareto_svg(points(ROWS), "run <x>")
    root = ET.fromstring(svg)
    markers = {e.get("id"): e for e in root.iter() if (e.get("id") or "").startswith("point-")}
    assert set(markers) == {"point-none-k3", "point-llmlingua-4x", "point-none-k8"}

    def fill(marker: ET.Element) -> str:
        styles = " ".join(e.get("style") or "" for e in marker.iter())
        return re.findall(r"fill: (#[0-9a-f]{6})", styles)[0]

    colours = {name: fill(m) for name, m in markers.items()}
    assert colours["point-none-k3"] == colours["point-none-k8"] != colours["point-llmlingua-4x"]  # frontier apart
    assert sum(1 for e in root.iter() if e.get("id") == "frontier") == 1  # the frontier line
    assert "run &lt;x&gt;" in svg and "<script" not in svg
    assert svg.startswith("<svg") and "no setting has both" in pareto_svg([], "empty")


def test_report_markdown_has_the_bill_the_frontier_and_the_decisions() -> None:
    decisions = [
        {
            "created_at": dt.datetime(2026, 11, 29, 22, 13),
            "decision": "fail",
            "exit_code": 1,
            "baseline": "none-k8",
            "candidate": "llmlingua-4x",
            "n_questions": 1000,
            "report_path": "gate.md",
        }
    ]
    md = report_markdown("r1", ROWS, decisions, "pareto.svg")
    assert "![answer quality vs end-to-end latency](pareto.svg)" in md
    assert "| **none-k3** |" in md and "| llmlingua-4x |" in md and "| **none-k8** |" in md
    assert "**FAIL** (exit 1): llmlingua-4x vs none-k8 on 1000 paired questions; report gate.md" in md
    assert "answers-phase compressor s" in md and "end-to-end p50 s (live)" in md
    assert "offline s / request (not in end-to-end)" in md
    assert "None yet" in report_markdown("r1", ROWS, [], None)


def test_the_stores_pareto_view_and_the_reports_frontier_agree() -> None:
    import duckdb

    from eval.store.schema import VIEWS

    rows = [*ROWS, {"setting_name": "no-quality", "e2e_cold_p50_s": 0.1, "answer_token_recall": None, "n": 110}]
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE v_leaderboard (run_id VARCHAR, setting_hash VARCHAR, setting_name VARCHAR, "
        "e2e_cold_p50_s DOUBLE, answer_token_recall DOUBLE)"
    )
    for r in rows:
        con.execute(
            "INSERT INTO v_leaderboard VALUES ('r', ?, ?, ?, ?)",
            [r["setting_name"], r["setting_name"], r["e2e_cold_p50_s"], r["answer_token_recall"]],
        )
    in_sql = {name for (name,) in con.execute(f"SELECT setting_name FROM ({VIEWS['v_pareto']})").fetchall()}
    assert in_sql == frontier(points(rows)) == {"none-k3", "none-k8"}


NOT_FOR_PEOPLE = r"\b(NULL|None|nan|NaN)\b"
"""How a missing figure must never reach a person: the store's NULL, Python's None, a float's nan."""


def test_missing_figures_are_the_empty_cell_mark_never_null_none_or_nan() -> None:
    import re

    from eval.cells import EMPTY
    from eval.release_report import BILL, BREAK_EVEN

    failed = {key: None for key, _, _ in BILL} | {"setting_name": "failed-k3", "n": 110}
    degenerate = {key: 0.5 for key, _, _ in BILL} | {"setting_name": "degenerate-k3", "faithfulness": float("nan")}
    no_baseline = {key: None for key, _, _ in BREAK_EVEN} | {"setting_name": "pruned-4x-k3", "predicted_speedup": 1.4}
    run = {"latency_session": "s1", "probe_repeats": None, "aa_ratio": 1.004, "aa_ci_low": None, "aa_ci_high": None}
    decisions = [
        {"created_at": dt.datetime(2026, 11, 29, 22, 13), "decision": "undecided", "exit_code": 2,
         "baseline": "none-k8", "candidate": "degenerate-k3", "n_questions": 40, "report_path": None}
    ]  # fmt: skip
    rows = [*ROWS[:3], failed, degenerate]
    md = report_markdown("r1", rows, decisions, "pareto.svg", [no_baseline], run | {"aa_n": None})
    assert not re.search(NOT_FOR_PEOPLE, md), md
    board = {line.split(" | ")[0].strip("|* "): line.split(" | ") for line in md.splitlines() if line.startswith("| ")}
    assert board["failed-k3"][1:] == ["110", *[EMPTY] * (len(BILL) - 3), EMPTY + " |"]
    faithfulness = [k for k, _, _ in BILL].index("faithfulness")
    assert board["degenerate-k3"][faithfulness] == EMPTY and board["degenerate-k3"].count(EMPTY) == 1
    assert board["pruned-4x-k3"].count("never") == 2 and "1.40x" in board["pruned-4x-k3"]
    assert f"A/A twins 1.004x [{EMPTY}, {EMPTY}]" in md


def test_settings_that_sit_together_get_numbers_that_never_overlap_and_a_key_that_names_them() -> None:
    import re

    from eval.plots import LABEL_PT, Point, pareto_plot

    names = [f"pruned-{r}x-k8-hybrid-dense" for r in range(2, 9)] + ["none-k8-hybrid-dense", "llmlingua-4x-k8"]
    crowd = [Point(n, 0.50 + 0.002 * i, 0.40 + 0.001 * i, 0.03) for i, n in enumerate(names[:7])]
    pts = [*crowd, Point(names[7], 0.501, 0.401, 0.03), Point(names[8], 4.9, 0.17, 0.04)]  # 8 of 9 in one spot
    svg = pareto_plot(pts, {names[0], names[7]}, "crowd")
    root = ET.fromstring(svg)

    def text_of(gid: str) -> ET.Element:
        (group,) = [e for e in root.iter() if e.get("id") == gid]
        (text,) = [e for e in group.iter() if e.tag.endswith("text")]
        return text

    for name in names:  # a setting's name is printed once, in the key, never beside its crowded point
        assert len(re.findall(rf">[^<]*\b{re.escape(name)}</text>", svg)) == 1, name
    key = {}
    for name in names:
        number, named = (text_of(f"key-{name}").text or "").split()
        key[number] = named
    labels = {name: text_of(f"label-{name}") for name in names}
    assert sorted(key, key=int) == [str(i) for i in range(1, len(names) + 1)]
    assert {key[label.text or ""] for label in labels.values()} == set(names)  # each number keys its own point
    assert all(key[labels[name].text or ""] == name for name in names)
    # Numbered by latency: the fastest first, the slow outlier last.
    assert key["1"] == names[0] and key["2"] == names[7] and key[str(len(names))] == names[8]
    # No two numbers overprint: their boxes (the label font's digit width and height) are apart.
    at = [(float(t.get("x") or 0), float(t.get("y") or 0), len(t.text or "")) for t in labels.values()]
    for i, (x1, y1, n1) in enumerate(at):
        for x2, y2, n2 in at[i + 1 :]:
            apart_x = abs(x1 - x2) >= 0.64 * LABEL_PT * (n1 + n2) / 2
            assert apart_x or abs(y1 - y2) >= LABEL_PT, (x1, y1, x2, y2)
