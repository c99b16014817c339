"""The one-page HTML report, rendered in headless Chromium (Debian's `chromium`, `make browser`): the DOM
has every section, plot mark and decision, and the screenshot is a page with both plots drawn on it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from eval.release_report import html_report, write_html_report
from eval.store import DuckDBStore
from eval.store.rows import GateDecisionRow
from tests.helpers import run_row, sample_row

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MACHINE = json.dumps({"cpu": "AMD EPYC 9654", "cores": 16, "gpus": ["NVIDIA H200"]})
"""The run's machine as `runs.hardware_json` stores it."""


def _store(tmp_path: Path) -> DuckDBStore:
    """A run with no compression and two compressors at top-8 (probe latencies on every question) and a
    decision for each."""
    import datetime as dt

    store = DuckDBStore(tmp_path / "r.duckdb")
    store.start_run(run_row(hardware_json=MACHINE))
    settings = {
        "base": ("none", 1.0, 0.0, 0.9),
        "pruned": ("pruned", 4.0, 0.00005, 0.8),
        "lingua": ("llmlingua", 4.0, 0.003, 0.5),
    }
    for name, (compressor, ratio, k, recall) in settings.items():
        rows = []
        for n in range(40):
            context = 800 + 10 * n
            out = round(context / ratio)
            rows.append(
                sample_row(
                    f"q{n}", name, setting_name=f"{compressor}-4x-k8" if compressor != "none" else "none-k8",
                    compressor=compressor, target_ratio=ratio, top_k=8, answer=f"answer {n} by {name}",
                    gold_answers=json.dumps([f"gold {n}"]), answer_token_recall=recall if n % 3 else 0.0,
                    answer_contains=recall, context_tokens_in=context, context_tokens_out=out,
                    prompt_tokens=out + 100, probe_cached_tokens=0, probe_ttft_s=0.05 + 0.001 * (out + 100),
                    compress_cold_seconds=k * context, e2e_cold_s=0.07 + k * context + 0.001 * (out + 100),
                    retrieval="hybrid", layout="ranked",
                )
            )  # fmt: skip
        store.add_samples(rows)
    for cand, verdict in (("pruned", "pass"), ("lingua", "fail")):
        store.add_decision(
            GateDecisionRow(
                decision_id=uuid.uuid4().hex[:12], created_at=dt.datetime.now(dt.UTC), baseline="none-k8",
                candidate=f"{'llmlingua' if cand == 'lingua' else 'pruned'}-4x-k8", baseline_hash="base",
                candidate_hash=cand, baseline_run="r1", candidate_run="r1", decision=verdict,
                exit_code=0 if verdict == "pass" else 1, reasons=json.dumps([f"answer_token_recall: {verdict}"]),
                n_questions=40, policy_json="{}", policy_sha256="p",
                results_json=json.dumps({"metrics": [{"name": "answer_token_recall", "population": "answerable",
                    "n": 40, "baseline_mean": 0.6, "candidate_mean": 0.5, "diff": -0.1, "ci_low": -0.2,
                    "ci_high": 0.0, "margin": 0.03, "verdict": verdict, "advisory": False}], "latency": None}),
            )
        )  # fmt: skip
    return store


def test_the_page_is_static_and_holds_every_part(tmp_path: Path) -> None:
    page = html_report(_store(tmp_path), "r1")
    assert "<script" not in page and not re.search(r'(src|href)="(https?:)?//', page)  # nothing to fetch
    assert page.count("<svg") == 2 and page.count('class="decision"') == 2
    for mark in ("point-none-k8", "point-pruned-4x-k8", "curve-pruned-4x-k8", "measured-llmlingua-4x-k8"):
        assert f'id="{mark}"' in page
    # Question q1 lost recall (0.9 -> 0.8); q0 tied at 0 and is no loss.
    assert "Questions where the candidate lost most" in page and "gold 1" in page and "gold 0" not in page
    assert "AMD EPYC 9654, 16 cores, NVIDIA H200 &middot; engine" in page  # the machine, GPUs included


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make browser: Debian's chromium package)")
def test_the_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    from PIL import Image

    path = write_html_report(_store(tmp_path), "r1", tmp_path / "report.html")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,3600"]
    dom = subprocess.run(
        [str(CHROMIUM), *flags, "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    # The browser parsed both inline plots with their marks, both decisions and the leaderboard.
    assert dom.count("<svg") == 2 and len(re.findall(r'<section class="decision"', dom)) == 2
    assert len(re.findall(r'id="point-[^"]+"', dom)) == 3 and len(re.findall(r'id="curve-[^"]+"', dom)) == 2
    assert 'data-verdict="pass"' in dom and 'data-verdict="fail"' in dom and "Leaderboard" in dom
    shot = tmp_path / "shot.png"
    subprocess.run([str(CHROMIUM), *flags, f"--screenshot={shot}", path.as_uri()], capture_output=True, timeout=120)
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 3600)
    pixels = list(image.getdata())
    background = max(set(pixels[::97]), key=pixels[::97].count)
    drawn = sum(p != background for p in pixels) / len(pixels)
    assert drawn > 0.05  # not a blank page

    # The plots' marks are on the screenshot: the frontier magenta and the blue of the other settings.
    def near(colour: tuple[int, int, int]) -> int:
        return sum(max(abs(a - b) for a, b in zip(p, colour, strict=True)) < 40 for p in pixels[::3])

    assert near((0xC2, 0x18, 0x5B)) > 50 and near((0x15, 0x65, 0xC0)) > 50


def test_a_missing_figure_is_never_null_none_or_nan_on_the_page(tmp_path: Path) -> None:
    """A failed setting (every metric NULL), a run whose A/A interval is missing, and a latency verdict read
    from the paired ratios alone (no mean latency of either side): each gap is the empty-cell mark."""
    import datetime as dt

    from eval.cells import EMPTY

    store = DuckDBStore(tmp_path / "r.duckdb")
    store.start_run(run_row(hardware_json=MACHINE, latency_session="s1", probe_repeats=3, aa_ratio=1.004))
    store.add_samples([sample_row(f"q{n}", "ok", answer_token_recall=0.5) for n in range(4)])
    store.add_samples(
        [sample_row(f"q{n}", "bad", setting_name="pruned-4x-k3", status="failed", error="boom") for n in range(4)]
    )
    latency = {"metric": "e2e_cold_s", "n": 4, "baseline_mean": None, "candidate_mean": None, "speedup": 1.8,
               "ci_low": 1.6, "ci_high": 2.0, "min_speedup": 1.2, "verdict": "pass"}  # fmt: skip
    store.add_decision(
        GateDecisionRow(
            decision_id="d1", created_at=dt.datetime.now(dt.UTC), baseline="none-k3-ok", candidate="pruned-4x-k3",
            baseline_hash="ok", candidate_hash="bad", baseline_run="r1", candidate_run="r1", decision="undecided",
            exit_code=2, reasons="[]", n_questions=4, policy_json="{}", policy_sha256="p",
            results_json=json.dumps({"metrics": [], "latency": latency}),
        )
    )  # fmt: skip
    page = html_report(store, "r1")
    text = re.sub(r"<svg.*?</svg>", "", page, flags=re.S)  # the plots' own path data is no text to read
    assert not re.search(r"\b(NULL|None|nan|NaN)\b", text), text
    assert f"A/A twins 1.004x [{EMPTY}, {EMPTY}]" in text
    failed = re.search(r"<tr><td>pruned-4x-k3</td>(.*?)</tr>", text)
    assert failed is not None and f"<td>{EMPTY}</td>" in failed.group(1)
    assert f"<td>{EMPTY}</td><td>{EMPTY}</td><td>1.80x</td>" in text  # the decision's latency row


def _luminance(colour: str) -> float:
    """WCAG relative luminance of `#rrggbb` or `#rgb`."""
    digits = colour.lstrip("#")
    if len(digits) == 3:
        digits = "".join(c * 2 for c in digits)
    channels = [int(digits[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(a: str, b: str) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_a_dark_system_theme_gets_a_dark_page_with_light_text_and_every_text_colour_reads(tmp_path: Path) -> None:
    page = html_report(_store(tmp_path), "r1")
    assert '<meta name="color-scheme" content="light dark">' in page
    style = page.split("<style>")[1].split("</style>")[0]
    dark = style.split("@media (prefers-color-scheme: dark) {")[1]
    dark = dark[: dark.index("\n}")]  # the media block ends at its own closing brace
    body = re.search(r"body \{([^}]*)\}", dark)
    assert body is not None
    background = re.search(r"background: (#[0-9a-f]{3,6})", body.group(1))
    text = re.search(r"(?<!-)color: (#[0-9a-f]{3,6})", body.group(1))
    assert background is not None and text is not None
    assert _luminance(background.group(1)) < 0.05 and _luminance(text.group(1)) > 0.7  # dark page, light text
    # Every text colour of the dark theme reads on its page and on its tables (WCAG AA: 4.5:1).
    table = re.search(r"table \{[^}]*background: (#[0-9a-f]{3,6})", dark)
    assert table is not None and _luminance(table.group(1)) < 0.05
    colours = re.findall(r"(?<![-\w])color: (#[0-9a-f]{3,6})", dark)
    assert len(colours) >= 5  # body, the three verdicts, captions
    for colour in colours:
        assert min(_contrast(colour, background.group(1)), _contrast(colour, table.group(1))) >= 4.5, colour
    # The light theme's own rules stay outside the media block (the default page is unchanged).
    assert re.search(r"body \{[^}]*background: #fafafa", style.split("@media")[0])
