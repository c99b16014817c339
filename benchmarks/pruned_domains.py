"""Pruning across corpora: the selector's budget knobs chosen on the tune splits of three domains, every
domain's held-out split scored once, without generation (the context a compressor leaves is measured).

Domains (top-8 contexts, dense reranking, the bundled MiniLM, indexes with sentence vectors):
- encyclopedia: the bundled corpus; tune = benchmarks/data/pruned_tune_questions.json (120 hand-written),
  held out = benchmarks/data/handwritten_qa.jsonl (329 hand-written, never used to choose);
- django-docs: Django's FAQ/how-to/tutorial pages (configs/django-faithfulness-sweep.yaml's index); 270
  hand-written questions (benchmarks/data/django_qa.jsonl) split by sha256 of the id;
- nodejs-docs: Node.js 18's Markdown API docs; 605 questions from the structure-aware generator
  (benchmarks/data/nodejs_structure_qa.jsonl) split by sha256 of the id.

For each selector: context token recall (share of the reference's content words in the final context,
the gate's context metric) and realized ratio, against the uncompressed top-8. Selectors: today's fixed
`pruned` at 4x and 8x, and `pruned-auto` (ratio 8 as a ceiling) over a grid of relevance share
and passages kept whole (w: the reranker's first w passages are not pruned), at temperature 0.1 with pronoun
antecedents, structure units (a list item's or code block's lead-in, a table row's header, a question
heading's answer), section leads (a section's first prose sentence) and question words (each content word
of the question the context has stays) on. The choice: the auto setting with the
largest mean realized ratio whose context token recall is within 5 points of uncompressed on every tune split
(else the smallest worst loss).
Prints the tune grid, then the held-out figures of the chosen setting beside the fixed 4x and 8x, and one
JSON line.

    .venv/bin/python benchmarks/pruned_domains.py
    .venv/bin/python benchmarks/pruned_domains.py --write-held-out runs/held-out   # the docs splits as files
"""

from __future__ import annotations

import hashlib
import itertools
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DATA = Path(__file__).parent / "data"
SHARES = [0.85, 0.9, 0.93, 0.95]
WHOLE = [0, 1, 2]
"""The grid of the fourth change (December 2): relevance share by passages kept whole, temperature 0.1,
section leads (the section's first prose sentence), question words, antecedents and structure units on. The
first two grids (shares 0.7-0.95, temperatures 0.03-0.1, antecedents, units and section leads on/off;
docs/pruning.md) never chose below 0.95 or 0.1, nor antecedents, units or section leads off; the third
(shares 0.85-0.95 by 0-2 whole passages) chose 0.95 with two."""
MAX_LOSS = 0.05


def _split(qid: str) -> str:
    return "tune" if int(hashlib.sha256(qid.encode()).hexdigest(), 16) % 2 == 0 else "test"


def _jsonl(path: Path) -> list[Any]:
    from corpus.models import Question

    return [Question.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]


def domains(work: Path, emb: Any) -> dict[str, tuple[Path, dict[str, list[Any]]]]:
    """Domain -> (index, {split: questions}); indexes are built where missing."""
    from corpus.bundled import bundled_index
    from corpus.models import Question
    from corpus.table import IndexOptions

    wiki = bundled_index(Path("runs/bench-levers/index.lancedb"), work, emb, IndexOptions(sentence_vectors=True))
    tune = [
        Question.model_validate(q) for q in json.loads((DATA / "pruned_tune_questions.json").read_text())["questions"]
    ]
    out = {"encyclopedia": (wiki, {"tune": tune, "test": _jsonl(DATA / "handwritten_qa.jsonl")})}
    for name, index, file in (
        ("django-docs", Path("runs/django/index.lancedb"), DATA / "django_qa.jsonl"),
        ("nodejs-docs", Path("runs/nodejs/index.lancedb"), DATA / "nodejs_structure_qa.jsonl"),
    ):
        if not index.exists():
            sys.exit(f"error: {index} missing: build it as docs/pruning.md says")
        qs = [q for q in _jsonl(file) if q.answerable]
        out[name] = (index, {s: [q for q in qs if _split(q.id) == s] for s in ("tune", "test")})
    return out


def selector_recall(comp: Any, tops: list[tuple[Any, list[Any]]], ratio: float) -> tuple[float, float]:
    """Mean context token recall of what `comp` leaves of each question's top-k at `ratio`, and the realized
    ratio (tokens in / tokens out over all questions)."""
    from eval.metrics import context_token_recall
    from eval.prompt import context_block

    recalls, ins, outs = [], 0, 0
    for q, top in tops:
        r = comp.compress([h.text for h in top], q.question, ratio)
        context = context_block([top[i].heading for i in r.kept or []], r.texts)
        recalls.append(context_token_recall(context, q.answers))
        ins, outs = ins + r.tokens_in, outs + r.tokens_out
    return statistics.mean(recalls), ins / max(outs, 1)


def write_held_out(folder: Path) -> None:
    """Each documentation domain's held-out split as a question file (for a sweep with generation)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, file in (("django-docs", DATA / "django_qa.jsonl"), ("nodejs-docs", DATA / "nodejs_structure_qa.jsonl")):
        held = [q for q in _jsonl(file) if q.answerable and _split(q.id) == "test"]
        (folder / f"{name}-test.jsonl").write_text("".join(q.model_dump_json() + "\n" for q in held))
        print(f"{folder / f'{name}-test.jsonl'}: {len(held)} questions")


def main() -> None:
    from corpus.runtime import quiet_offline_env

    if "--write-held-out" in sys.argv:  # the held-out splits as question files, then stop
        write_held_out(Path(sys.argv[sys.argv.index("--write-held-out") + 1]))
        return
    quiet_offline_env()
    from transformers import AutoTokenizer

    from corpus.embed import SentenceTransformerEmbedder
    from corpus.retrieve import LanceRetriever
    from corpus.sentences import SentenceVectors
    from eval.compress.extractive import AutoPrunedCompressor, AutoPrunedConfig, PrunedCompressor
    from eval.engine.bundled_models import smollm2_dir
    from eval.metrics import context_token_recall
    from eval.prompt import context_block
    from eval.rerank import DenseReranker

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir()))

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    emb = SentenceTransformerEmbedder()
    work = Path(tempfile.mkdtemp(prefix="cribsheet-pruned-domains-"))
    selectors: dict[str, tuple[Any, float]] = {}
    results: dict[str, dict[str, dict[str, tuple[float, float]]]] = {}
    for domain, (index, splits) in domains(work, emb).items():
        retriever, reranker, stored = LanceRetriever(index, emb), DenseReranker(emb), SentenceVectors(index)
        selectors = {
            "pruned-4x": (PrunedCompressor(count, emb, stored), 4.0),
            "pruned-8x": (PrunedCompressor(count, emb, stored), 8.0),
        }
        for share, whole in itertools.product(SHARES, WHOLE):
            config = AutoPrunedConfig(relevance_share=share, whole_passages=whole)
            selectors[f"auto s{share} w{whole}"] = (
                AutoPrunedCompressor(count, emb, stored, config),
                8.0,
            )
        for split, questions in splits.items():
            tops = [(q, reranker.rerank(q.question, retriever.retrieve(q.question, 20))[:8]) for q in questions]
            base = [
                context_token_recall(context_block([h.heading for h in t], [h.text for h in t]), q.answers)
                for q, t in tops
            ]
            row: dict[str, tuple[float, float]] = {"none": (statistics.mean(base), 1.0)}
            for name, (comp, ratio) in selectors.items():
                row[name] = selector_recall(comp, tops, ratio)
            results.setdefault(domain, {})[split] = row
            print(
                f"{domain} {split}: {len(questions)} questions, uncompressed context token recall {row['none'][0]:.3f}"
            )
    autos = [n for n in selectors if n.startswith("auto")]

    def losses(name: str, split: str) -> list[float]:
        return [results[d][split]["none"][0] - results[d][split][name][0] for d in results]

    def mean_ratio(name: str, split: str) -> float:
        return statistics.mean(results[d][split][name][1] for d in results)

    ok = [n for n in autos if max(losses(n, "tune")) <= MAX_LOSS]
    chosen = (
        max(ok, key=lambda n: (mean_ratio(n, "tune"), n)) if ok else min(autos, key=lambda n: max(losses(n, "tune")))
    )
    print("\ntune splits: context token recall loss vs uncompressed (points) and realized ratio, per domain")
    header = "".join(f"{d[:12]:>18}" for d in results)
    print(f"{'selector':<22}{header}{'mean ratio':>11}")
    for name in ["pruned-4x", "pruned-8x", *autos]:
        cells = "".join(
            f"{100 * loss:>10.1f}{results[d]['tune'][name][1]:>7.2f}x "
            for d, loss in zip(results, losses(name, "tune"), strict=True)
        )
        print(f"{name:<22}{cells}{mean_ratio(name, 'tune'):>10.2f}{'  <- chosen' if name == chosen else ''}")
    print(f"\nheld-out splits (scored once): {chosen} beside the fixed selectors")
    figures: dict[str, Any] = {"chosen": chosen}
    for d in results:
        for name in ("pruned-4x", "pruned-8x", chosen):
            recall, ratio = results[d]["test"][name]
            loss = results[d]["test"]["none"][0] - recall
            print(f"  {d:<14}{name:<22} context token recall {recall:.3f} ({-100 * loss:+.1f} points), {ratio:.2f}x")
            key = "auto" if name == chosen else name
            figures[f"{d}_{key}_loss_points"] = round(100 * loss, 1)
            figures[f"{d}_{key}_ratio"] = round(ratio, 2)
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
