"""The report's plots, drawn with matplotlib's SVG backend: round ticks, text kept as text (searchable, and
sized by the page), and an opaque light background so black text and axes read on a dark page (Prefect's
UI) as well as on a light one. Each plot is returned as an inline `<svg>` element (no XML prologue), so a
page or a Prefect artifact needs no file server. Every setting's marker carries an id (`point-NAME`,
`measured-NAME`), each curve one (`curve-NAME`), and on the Pareto plot each point's number and key entry
theirs (`label-NAME`, `key-NAME`), so a browser test can find them.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Point:
    """One setting on the plot."""

    name: str
    latency_s: float
    """p50 of end-to-end latency with the compressor's cold cost (e2e_cold_s)."""
    quality: float
    """Mean answer token recall over answerable questions."""
    half_width: float
    """Half the 95 % normal interval of the mean (1.96 sd / sqrt n)."""


FRONT, OTHER = "#c2185b", "#1565c0"
"""Frontier and other settings: distinguishable in colour and in lightness (read in grey too)."""
PALETTE = ["#1565c0", "#c2185b", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#5d4037", "#455a64"]


def _safe(name: str) -> str:
    """A setting name as an SVG id."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, facecolor="white", edgecolor="#9e9e9e", linewidth=1)
    return fig


def _svg(fig: Any) -> str:
    """The figure as an inline <svg> element with its text as text."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "cribsheet", "font.size": 10}):
        fig.savefig(buf, format="svg", facecolor=fig.get_facecolor(), edgecolor=fig.get_edgecolor())
    text = buf.getvalue()
    return re.sub(r"\s*<metadata>.*?</metadata>", "", text[text.index("<svg") :], flags=re.S)  # no RDF block


def _style(ax: Any, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_facecolor("white")
    ax.set_title(title, loc="left", fontsize=11, color="black")
    ax.set_xlabel(xlabel, color="black")
    ax.set_ylabel(ylabel, color="black")
    ax.grid(True, color="#e0e0e0", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.tick_params(colors="black")
    for spine in ax.spines.values():
        spine.set_color("#616161")


LABEL_PT = 8.0
"""Font size of a point's number on the Pareto plot and of its key."""
_DIGIT_PT, _MARKER_PT = 0.64 * LABEL_PT, 7.0
"""Width of one digit of the label font (DejaVu Sans: 0.64 em), and the markers' diameter, in points."""
_RINGS = (9.0, 14.0, 20.0, 27.0, 35.0, 44.0)
_ANGLES = (45, 0, 90, -45, 135, 180, -90, -135)
"""Where a number may go, in order of preference: centre offsets from its point (points), by ring and angle."""


def _box(x: float, y: float, text: str) -> tuple[float, float, float, float]:
    """The box (x0, y0, x1, y1, in points) of `text` in the label font centred at (x, y), with a little room."""
    half_w, half_h = (_DIGIT_PT * len(text) + 2.0) / 2, (LABEL_PT + 2.0) / 2
    return x - half_w, y - half_h, x + half_w, y + half_h


def _overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _hits_marker(box: tuple[float, float, float, float], x: float, y: float) -> bool:
    """Whether `box` covers any of the round marker centred at (x, y)."""
    nearest_x, nearest_y = min(max(x, box[0]), box[2]), min(max(y, box[1]), box[3])
    return (nearest_x - x) ** 2 + (nearest_y - y) ** 2 < (_MARKER_PT / 2) ** 2


def place_labels(
    anchors: Sequence[tuple[float, float]], texts: Sequence[str], bounds: tuple[float, float, float, float]
) -> list[tuple[float, float]]:
    """Offsets (points) that put each text near its anchor (points, on the page) without covering another
    text, any marker, or leaving `bounds`: greedy, in the given order, the first free place of `_RINGS` x
    `_ANGLES`; where none is free (a crowd of dozens), the place with the fewest collisions. Deterministic:
    the same points give the same plot.
    """
    placed: list[tuple[float, float, float, float]] = []
    offsets = []
    for (ax_, ay), text in zip(anchors, texts, strict=True):
        best: tuple[int, tuple[float, float]] | None = None
        for ring in _RINGS:
            for angle in _ANGLES:
                dx, dy = ring * math.cos(math.radians(angle)), ring * math.sin(math.radians(angle))
                box = _box(ax_ + dx, ay + dy, text)
                inside = bounds[0] <= box[0] and box[2] <= bounds[2] and bounds[1] <= box[1] and box[3] <= bounds[3]
                clashes = (0 if inside else 100) + sum(_overlaps(box, other) for other in placed)
                clashes += sum(_hits_marker(box, mx, my) for mx, my in anchors)
                if best is None or clashes < best[0]:
                    best = (clashes, (dx, dy))
                if clashes == 0:
                    break
            if best is not None and best[0] == 0:
                break
        assert best is not None
        offsets.append(best[1])
        placed.append(_box(ax_ + best[1][0], ay + best[1][1], text))
    return offsets


def pareto_plot(pts: Sequence[Point], best: set[str], title: str) -> str:
    """Answer token recall (with its 95 % interval) against end-to-end cold latency p50 (log scale); the
    frontier in colour and joined by a dashed line. Each point carries a number, placed where it covers no
    other number nor marker, and a key below the plot names each number's setting (frontier in bold): names
    of settings that sit close together never overprint each other.
    """
    from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter, ScalarFormatter

    # Numbered by latency (the x axis), so the key reads left to right; ties by quality, then name.
    ordered = sorted(pts, key=lambda p: (p.latency_s, -p.quality, p.name))
    columns = 2 if len(ordered) > 4 else 1
    key_rows = -(-len(ordered) // columns)
    key_in = 0.1 + 0.17 * key_rows if ordered else 0.0
    fig = _figure(7.2, 4.4 + key_in)
    ax = fig.add_subplot(1, 1, 1)
    _style(ax, title, "end-to-end latency p50, cold compressor cost (s, log scale)", "answer token recall (95 % CI)")
    if not pts:
        ax.text(0.5, 0.5, "no setting has both a latency and a quality", ha="center", transform=ax.transAxes)
        return _svg(fig)
    front = [p for p in ordered if p.name in best]
    if len(front) > 1:
        ax.plot([p.latency_s for p in front], [p.quality for p in front], "--", color=FRONT, lw=1.2, gid="frontier")
    for p in ordered:
        colour = FRONT if p.name in best else OTHER
        ax.errorbar([p.latency_s], [p.quality], yerr=[p.half_width], fmt="none", ecolor=colour, capsize=3)
        ax.plot([p.latency_s], [p.quality], "o", color=colour, ms=_MARKER_PT, gid=f"point-{_safe(p.name)}")
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
    lo = min(p.latency_s for p in pts) / 1.5
    hi = max(p.latency_s for p in pts) * 1.8
    ax.set_xlim(lo, hi)
    # The plot above, laid out as before; the key in a frame of its own below it (tight_layout leaves it alone).
    fig.tight_layout(rect=(0.0, key_in / (4.4 + key_in), 1.0, 1.0))
    key = fig.add_axes((0.02, 0.01, 0.96, (key_in - 0.05) / (4.4 + key_in)))
    key.set_axis_off()
    for i, p in enumerate(ordered, start=1):
        row, col = (i - 1) % key_rows, (i - 1) // key_rows
        x, y = 0.01 + col / columns, 1 - (row + 0.5) / key_rows
        key.plot([x], [y], "o", color=FRONT if p.name in best else OTHER, ms=5, transform=key.transAxes)
        key.text(
            x + 0.015, y, f"{i}  {p.name}", va="center", fontsize=LABEL_PT, color="black",
            fontweight="bold" if p.name in best else "normal", transform=key.transAxes, gid=f"key-{_safe(p.name)}",
        )  # fmt: skip
    # The numbers go on last, placed on the final layout: where a point lands on the page is known only now.
    to_pt = 72.0 / fig.dpi
    on_page = [ax.transData.transform((p.latency_s, p.quality)) for p in ordered]
    anchors = [(float(x) * to_pt, float(y) * to_pt) for x, y in on_page]
    frame = ax.get_window_extent()
    bounds = (frame.x0 * to_pt, frame.y0 * to_pt, frame.x1 * to_pt, frame.y1 * to_pt)
    numbers = [str(i) for i in range(1, len(ordered) + 1)]
    for p, number, offset in zip(ordered, numbers, place_labels(anchors, numbers, bounds), strict=True):
        far = math.hypot(*offset) > _RINGS[0]
        ax.annotate(
            number, (p.latency_s, p.quality), xytext=offset, textcoords="offset points", ha="center", va="center",
            fontsize=LABEL_PT, color="black", gid=f"label-{_safe(p.name)}",
            bbox={"boxstyle": "square,pad=0.05", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
            arrowprops={"arrowstyle": "-", "color": "#757575", "lw": 0.6, "shrinkA": 0, "shrinkB": _MARKER_PT / 2}
            if far else None,
        )  # fmt: skip
    return _svg(fig)


def speedup_at(row: Mapping[str, Any], context: float) -> float:
    """The break-even model's predicted end-to-end speed-up of a `v_break_even` row at `context` tokens."""
    t0, t1, t2 = row["ttft_intercept_s"], row["ttft_s_per_1k"], row["ttft_s_per_1k_squared"]
    rr, h, k, r = row["retrieve_rerank_s"], row["other_prompt_tokens"], row["cold_s_per_token"], row["realized_ratio"]

    def ttft(tokens: float) -> float:
        return float(t0 + t1 * tokens / 1000 + t2 * (tokens / 1000) ** 2)

    return float((rr + ttft(context + h)) / (rr + k * context + ttft(context / r + h)))


def break_even_plot(rows: Sequence[Mapping[str, Any]], title: str, longest: int = 8000) -> str:
    """Predicted end-to-end speed-up against context length, one curve per compressed setting, with the
    measured points on top, and the 1x (break-even) and 2x lines.
    """
    from matplotlib.ticker import MaxNLocator

    fig = _figure(7.2, 4.4)
    ax = fig.add_subplot(1, 1, 1)
    _style(ax, title, "context tokens before compression", "end-to-end speed-up vs no compression")
    usable = [r for r in rows if r.get("ttft_s_per_1k") is not None and r.get("realized_ratio")]
    if not usable:
        ax.text(0.5, 0.5, "no compressed setting with probe latencies", ha="center", transform=ax.transAxes)
        return _svg(fig)
    top = max(longest, int(max(r["context_tokens"] for r in usable) * 1.5))
    xs = [top * i / 200 for i in range(1, 201)]
    ax.axhline(1.0, color="#424242", lw=1, gid="break-even-line")
    ax.axhline(2.0, color="#9e9e9e", lw=1, ls=":", gid="two-x-line")
    for i, r in enumerate(usable):
        colour = PALETTE[i % len(PALETTE)]
        name = str(r["setting_name"])
        ax.plot(xs, [speedup_at(r, x) for x in xs], color=colour, lw=1.6, label=name, gid=f"curve-{_safe(name)}")
        if r.get("measured_speedup") is not None:
            ax.plot(
                [r["context_tokens"]], [r["measured_speedup"]], "o", color=colour, ms=7, mec="black",
                gid=f"measured-{_safe(name)}",
            )  # fmt: skip
    ax.set_xlim(0, top)
    highest = [speedup_at(r, x) for r in usable for x in xs] + [r["measured_speedup"] or 0 for r in usable]
    ax.set_ylim(0, max(2.2, max(highest) * 1.12))  # the 2x line and every measured point stay in view
    ax.xaxis.set_major_locator(MaxNLocator(nbins=8, steps=[1, 2, 2.5, 5, 10]))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
    ax.legend(fontsize=8, loc="upper left", frameon=True, facecolor="white", framealpha=1.0)
    fig.tight_layout()
    return _svg(fig)


def looks_plot(looks: Sequence[Mapping[str, Any]], title: str) -> str:
    """A sequential gate forming its decision: per metric, the estimate and its anytime-valid bounds against
    the questions seen, the decision boundary (dashed), and the look where the metric was decided (a ring).
    """
    metrics = sorted({str(r["metric"]) for r in looks})
    fig = _figure(7.2, 2.6 * max(1, len(metrics)))
    for i, metric in enumerate(metrics, start=1):
        rows = sorted((r for r in looks if r["metric"] == metric), key=lambda r: int(r["look"]))
        ax = fig.add_subplot(len(metrics), 1, i)
        _style(ax, f"{title}: {metric}" if i == 1 else metric, "paired questions seen", "estimate and bounds")
        n = [int(r["n"]) for r in rows]
        low = [float(r["lower"]) for r in rows]
        high = [float(r["upper"]) for r in rows]
        ax.fill_between(n, low, high, color=OTHER, alpha=0.25, step="post", gid=f"bounds-{_safe(metric)}")
        ax.plot(n, [float(r["estimate"]) for r in rows], "o-", color=FRONT, ms=4, gid=f"estimate-{_safe(metric)}")
        if rows and rows[-1].get("threshold") is not None:
            ax.axhline(float(rows[-1]["threshold"]), ls="--", color="black", lw=1, gid=f"boundary-{_safe(metric)}")
        decided = [r for r in rows if r["verdict"] in ("pass", "fail")]
        if decided:
            r = decided[0]
            ax.plot(
                [int(r["n"])],
                [float(r["estimate"])],
                "o",
                ms=12,
                mfc="none",
                mec="black",
                gid=f"decided-{_safe(metric)}",
            )
            ax.annotate(str(r["verdict"]).upper(), (int(r["n"]), float(r["estimate"])), xytext=(8, 6),
                        textcoords="offset points", fontsize=9)  # fmt: skip
    fig.tight_layout()
    return _svg(fig)
