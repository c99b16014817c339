"""Sentence boundaries in documentation text: the project's splitter (`corpus.text.sentence_spans`) against two
maintained splitters, pysbd 0.3.4 and syntok 1.4.4, on paragraphs whose boundaries were labelled by reading.

The text is what the index sees: the Django 5.2 docs' faq/, howto/ and intro/ (reStructuredText, Sphinx
sources written as .txt) and the Node.js 18 Markdown API docs, each file read by the folder source and its
registered extractor (`corpus.sources.iter_documents`, as `cribsheet index` reads a folder), then cut into the
document outline's prose blocks (kinds text, list and quote; code, tables, headings and signatures are no
prose). A paragraph is one prose block. The sample: per tree, the 120 paragraphs with at least two candidate
sentence ends ('.', '!' or '?' followed by whitespace) whose sha256 of (seed, tree, file, block index) is
lowest. Their true sentence starts were labelled blind (before any splitter was run on them) and are stored in
benchmarks/data/sentence_boundaries.jsonl: {"id", "tree", "source", "text", "starts"}, `starts` the character
offsets of every sentence start after the first.

For each splitter and tree: boundary precision, recall and F1 (micro, over all boundaries) with 95 % bootstrap
intervals over paragraphs (2,000 resamples, seeded), the paired interval of its F1 minus ours (the same
resamples), seconds per 1,000 paragraphs (best of three passes over the tree's paragraphs), and the errors by
class:
- missed before a lowercase opening: a missed boundary whose sentence opens with a lowercase identifier or
  command (`fs.readFile()` returns ..., `npm install` ...);
- false after an abbreviation: e.g., i.e., etc., vs., a single letter;
- false after a version or dotted name: "5.2.", "settings.py.", a split inside a dotted name;
- other misses and other false boundaries.
A predicted boundary is the offset of the first non-space character of a sentence after the first (pysbd
with `char_span=True`, checked against the text; syntok by its tokens' offsets); a sentence that opens on
closing punctuation (syntok's ". This flag" after "(...)") starts at its first word. The last line before the
JSON names the splitters whose F1 interval lies wholly above ours on both trees (the rule of docs/pruning.md
for replacing ours). Prints a table, then one JSON line. `--errors` lists every error; `--draft PATH` writes
the unlabelled sample (needs the trees).

pysbd 0.3.4 is not a dependency: its wheel also installs top-level `benchmarks` and `examples` packages, which
shadow this repository's `benchmarks/` for the tests. Install it into a folder of its own, which the script
appends to the end of its import path (syntok comes with the dev dependencies):

    .venv/bin/pip install --target .cache/pysbd pysbd==0.3.4

Usage: .venv/bin/python benchmarks/sentence_splitter.py [--pysbd .cache/pysbd] [--errors]
    [--draft PATH --django DIR --nodejs DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LABELS = Path(__file__).resolve().parent / "data" / "sentence_boundaries.jsonl"
SEED = "cribsheet-sentence-boundaries-1"
PER_TREE = 120
TREES = ("django", "nodejs")
DJANGO_PARTS = ("faq", "howto", "intro")
PROSE = ("text", "list", "quote")
CANDIDATE = re.compile(r"[.!?]\s")
RESAMPLES = 2_000
ERROR_CLASSES = (
    "missed_lowercase_opening",
    "missed_other",
    "false_abbreviation",
    "false_version_dotted",
    "false_other",
)

_ABBREVIATION = re.compile(
    r"(?:\b(?:e\.g|i\.e|etc|vs|cf|approx|incl|esp|al|Dr|Mr|Mrs|Ms|St|No|Fig|Vol|Inc|Ltd|Co|Jr|Sr|Prof)|\b[A-Za-z])\.$",
    re.I,
)
_VERSION = re.compile(r"v?\d+$")
_CLOSING = re.compile(r"[.!?)\]\"']+(?=\s|$)")

Splitter = Callable[[str], list[int]]


# --- the sample --------------------------------------------------------------------------------------------


def tree_paragraphs(tree: str, root: Path) -> Iterator[tuple[str, int, str]]:
    """(file relative to the tree's root, block index in its outline, text) of every prose block of a tree, read
    as the indexer reads a folder (`.txt` as reStructuredText for Django).
    """
    from corpus.sources import SkipLog, SourceConfig, iter_documents

    parts = [(root / part, f"{part}/") for part in DJANGO_PARTS] if tree == "django" else [(root, "")]
    extensions = {".txt": "rst"} if tree == "django" else {}
    for folder, prefix in parts:
        for doc in iter_documents(SourceConfig(path=folder, extensions=extensions), SkipLog()):
            for index, (start, end, kind) in enumerate(doc.outline):
                if kind in PROSE:
                    yield prefix + doc.id, index, doc.text[start:end]


def sample_key(tree: str, source: str, index: int) -> str:
    """The seeded draw order of a paragraph."""
    return hashlib.sha256(f"{SEED}\n{tree}/{source}\n{index}".encode()).hexdigest()


def draw(tree: str, root: Path, n: int = PER_TREE) -> list[dict[str, Any]]:
    """The first `n` paragraphs of a tree with at least two candidate sentence ends, in the seeded order."""
    eligible = [
        (sample_key(tree, source, index), source, index, text)
        for source, index, text in tree_paragraphs(tree, root)
        if len(CANDIDATE.findall(text)) >= 2
    ]
    chosen = sorted(eligible)[:n]
    return [
        {"id": f"{tree}:{source}#{index}", "tree": tree, "source": source, "text": text, "starts": []}
        for _, source, index, text in chosen
    ]


# --- the splitters, as boundary offsets --------------------------------------------------------------------


def boundaries(text: str, starts: list[int]) -> list[int]:
    """Sentence starts moved onto their first non-space character, the paragraph's own start left out. A start on
    closing punctuation that ends at whitespace (syntok opens a sentence with the "." of "(...)." ) moves past it:
    that is where the next sentence's words start; which side keeps the full stop is no boundary error.
    """
    first = len(text) - len(text.lstrip())
    last = len(text.rstrip())
    out = set()
    for s in starts:
        closing = _CLOSING.match(text, s)
        if closing:
            s = closing.end()
        while s < len(text) and text[s].isspace():
            s += 1
        if first < s < last:
            out.add(s)
    return sorted(out)


def ours(text: str) -> list[int]:
    """The project's splitter."""
    from corpus.text import sentence_spans

    return [s for s, _, _ in sentence_spans(text)][1:]


def make_pysbd() -> Splitter:
    """pysbd's English rules, offsets from `char_span=True` (checked; a segment it mislocated is found in order)."""
    import pysbd  # type: ignore[import-untyped,import-not-found,unused-ignore]

    segmenter = pysbd.Segmenter(language="en", clean=False, char_span=True)

    def split(text: str) -> list[int]:
        starts: list[int] = []
        at = 0
        for span in segmenter.segment(text):
            piece = span.sent.strip()
            if not piece:
                continue
            start = span.start + (len(span.sent) - len(span.sent.lstrip()))
            if text[start : start + len(piece)] != piece or start < at:
                start = text.find(piece, at)
                if start < 0:
                    raise ValueError(f"pysbd segment not found in order: {piece[:60]!r}")
            starts.append(start)
            at = start + len(piece)
        return starts[1:]

    return split


def syntok_split(text: str) -> list[int]:
    """syntok's segmenter: each sentence's first token's offset."""
    from syntok import segmenter  # type: ignore[import-untyped]

    return [sentence[0].offset for paragraph in segmenter.analyze(text) for sentence in paragraph if sentence][1:]


# --- scoring -----------------------------------------------------------------------------------------------


def classify(text: str, at: int, missed: bool) -> str:
    """The error class of a missed (`missed`) or false boundary at offset `at`."""
    if missed:
        opening = text[at]
        return "missed_lowercase_opening" if opening.islower() or opening in "_$.`-" else "missed_other"
    before = text[:at].rstrip()
    token = before.split()[-1] if before.split() else ""
    token = token.rstrip("\"')]}").lstrip("\"'([{")
    if _ABBREVIATION.search(token):
        return "false_abbreviation"
    if not text[at - 1].isspace():  # a split inside a token: "dgram.|Socket", ".|get_prep_value", "!|=="
        return "false_version_dotted" if text[at - 1] == "." else "false_other"
    bare = token.rstrip(".!?")
    return "false_version_dotted" if "." in bare or _VERSION.fullmatch(bare) else "false_other"


def prf(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> tuple[float, float, float]:
    """Micro precision, recall and F1 from per-paragraph counts."""
    t, p, n = float(tp.sum()), float(fp.sum()), float(fn.sum())
    precision = t / (t + p) if t + p else 1.0
    recall = t / (t + n) if t + n else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def resampled(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray, draws: np.ndarray) -> list[np.ndarray]:
    """Precision, recall and F1 of each bootstrap resample (a row of `draws`: paragraph indices)."""
    t, p, n = tp[draws].sum(axis=1), fp[draws].sum(axis=1), fn[draws].sum(axis=1)
    k = len(draws)
    precision = np.divide(t, t + p, out=np.ones(k), where=(t + p) > 0)
    recall = np.divide(t, t + n, out=np.ones(k), where=(t + n) > 0)
    f1 = np.divide(2 * precision * recall, precision + recall, out=np.zeros(k), where=(precision + recall) > 0)
    return [precision, recall, f1]


def interval(values: np.ndarray) -> list[float]:
    """The 95 % percentile interval, rounded."""
    return [round(float(np.percentile(values, 2.5)), 3), round(float(np.percentile(values, 97.5)), 3)]


def seconds_per_thousand(split: Splitter, texts: list[str], passes: int = 3) -> float:
    """Best of `passes` timed passes over `texts`, per 1,000 paragraphs."""
    best = float("inf")
    for _ in range(passes):
        start = time.perf_counter()
        for text in texts:
            split(text)
        best = min(best, time.perf_counter() - start)
    return best / len(texts) * 1000


def measure(
    name: str, split: Splitter, rows: list[dict[str, Any]], draws: np.ndarray
) -> tuple[dict[str, Any], np.ndarray, list[str]]:
    """One splitter on one tree's labelled paragraphs: figures, the F1 of each resample, a line per error."""
    tp, fp, fn = (np.zeros(len(rows), dtype=np.int64) for _ in range(3))
    errors: Counter[str] = Counter()
    lines: list[str] = []
    for i, row in enumerate(rows):
        text = row["text"]
        gold, got = set(row["starts"]), set(boundaries(text, split(text)))
        tp[i], fp[i], fn[i] = len(gold & got), len(got - gold), len(gold - got)
        for at, missed in sorted([(a, True) for a in gold - got] + [(a, False) for a in got - gold]):
            kind = classify(text, at, missed)
            errors[kind] += 1
            lines.append(f"{name:<8}{kind:<26}{row['id']}: ...{text[max(0, at - 50) : at]}|{text[at : at + 30]}...")
    precision, recall, f1 = prf(tp, fp, fn)
    samples = resampled(tp, fp, fn, draws)
    figures = {
        "precision": round(precision, 3),
        "recall": round(recall, 3),
        "f1": round(f1, 3),
        "precision_ci": interval(samples[0]),
        "recall_ci": interval(samples[1]),
        "f1_ci": interval(samples[2]),
        "seconds_per_1000": round(seconds_per_thousand(split, [r["text"] for r in rows]), 4),
        "errors": {k: errors[k] for k in ERROR_CLASSES},
    }
    return figures, samples[2], lines


def load(path: Path) -> list[dict[str, Any]]:
    """The labelled paragraphs, each checked: starts inside the text, sorted, on a non-space character."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for row in rows:
        if row["starts"] != boundaries(row["text"], row["starts"]):
            raise ValueError(f"{row['id']}: starts must be sorted, distinct, inside the text, on a non-space")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=Path, default=LABELS)
    parser.add_argument("--errors", action="store_true", help="list every error")
    parser.add_argument("--seed", type=int, default=20_261_201)
    parser.add_argument("--draft", type=Path, help="write the unlabelled sample here and stop")
    parser.add_argument("--pysbd", type=Path, default=Path(".cache/pysbd"), help="folder pysbd was installed into")
    home = Path.home() / ".cache" / "cribsheet" / "doctrees"
    parser.add_argument("--django", type=Path, default=home / "rst", help="the Django docs/ folder")
    parser.add_argument("--nodejs", type=Path, default=home / "markdown", help="the Node.js doc/api folder")
    args = parser.parse_args()
    if args.draft:
        rows = draw("django", args.django) + draw("nodejs", args.nodejs)
        args.draft.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        print(f"{len(rows)} paragraphs -> {args.draft}")
        return
    started = time.perf_counter()
    rows = load(args.labels)
    sys.path.append(str(args.pysbd.resolve()))  # appended: its `benchmarks` package never shadows ours
    splitters: dict[str, Splitter] = {"ours": ours, "syntok": syntok_split}
    try:
        splitters = {"ours": ours, "pysbd": make_pysbd(), "syntok": syntok_split}
    except ImportError:
        print(f"pysbd is not installed in {args.pysbd} (see the module doc): measuring ours and syntok only")
    for split in splitters.values():
        split("Warm up. Once.")
    results: dict[str, Any] = {}
    error_lines: list[str] = []
    print(f"sentence boundaries, labelled by reading ({args.labels.name}); 95 % bootstrap intervals over paragraphs")
    header = f"{'tree':<8}{'splitter':<9}{'P':>6}{'P 95 %':>15}{'R':>7}{'R 95 %':>15}{'F1':>7}{'F1 95 %':>15}"
    print(header + f"{'F1 - ours 95 %':>18}{'s/1k':>8}  " + "  ".join(c.replace("_", " ") for c in ERROR_CLASSES))
    for tree in TREES:
        mine = [r for r in rows if r["tree"] == tree]
        results[tree] = {"paragraphs": len(mine), "boundaries": sum(len(r["starts"]) for r in mine)}
        draws = np.random.default_rng(args.seed).integers(0, len(mine), size=(RESAMPLES, len(mine)))
        f1s: dict[str, np.ndarray] = {}
        for name, split in splitters.items():
            figures, f1s[name], lines = measure(name, split, mine, draws)
            if name != "ours":  # paired: the same resamples
                figures["f1_minus_ours_ci"] = interval(f1s[name] - f1s["ours"])
            results[tree][name] = figures
            error_lines += [f"{tree:<8}{line}" for line in lines]
            p, r, f = (figures[k] for k in ("precision", "recall", "f1"))
            ci = {k: "[{:.3f}, {:.3f}]".format(*figures[f"{k}_ci"]) for k in ("precision", "recall", "f1")}
            counts = "".join(f"{figures['errors'][c]:>{len(c) + 2}}" for c in ERROR_CLASSES)
            delta = "[{:+.3f}, {:+.3f}]".format(*figures["f1_minus_ours_ci"]) if name != "ours" else ""
            print(
                f"{tree:<8}{name:<9}{p:>6.3f}{ci['precision']:>15}{r:>7.3f}{ci['recall']:>15}{f:>7.3f}{ci['f1']:>15}"
                f"{delta:>18}{figures['seconds_per_1000']:>8.3f}{counts}"
            )
        print(f"{'':<8}({results[tree]['paragraphs']} paragraphs, {results[tree]['boundaries']} boundaries)")
    # The strict rule of docs/pruning.md: replace ours only with a splitter whose F1 interval lies wholly above
    # ours on both trees.
    results["better_than_ours_on_both_trees"] = [
        name
        for name in splitters
        if name != "ours" and all(results[t][name]["f1_ci"][0] > results[t]["ours"]["f1_ci"][1] for t in TREES)
    ]
    better = results["better_than_ours_on_both_trees"]
    print(f"better than ours on F1 on both trees, intervals apart: {', '.join(better) or 'none'}")
    if args.errors:
        print("\n".join(error_lines))
    results["seconds"] = round(time.perf_counter() - started, 2)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
