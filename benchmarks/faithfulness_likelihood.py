"""Fits and validates the likelihood faithfulness verifier (eval/faithfulness/likelihood.py) on labelled answers.

Labelled sets (claim-bearing answers only; each labelled supported / unsupported / no claim by two readers
working apart, blind to each other and to every checker, disagreements settled):
- documentation: Django (benchmarks/data/faithfulness_django.json), Debian's maint-guide
  (faithfulness_maintguide.json), Node.js API docs (faithfulness_nodeapi.json);
- encyclopedia: faithfulness_real.json (tune, test, and the held-out hand-written split).

Each case is scored by the rule checker (its claims and verdicts) and its answer's tokens by the bundled
generator on vLLM: log p given the prompt the answer came from and given the prompt without passages. Those
log-probabilities are cached in benchmarks/data/likelihood_features.json (keyed by case id and generator)
so a refit does not rerun the engine; --recompute drops the cache.

Per corpus kind, two logistic models are fitted on that kind's tune splits only: `likelihood` (the likelihood
features) and `combined` (plus the rule checker's share of supported claims). Grouped 5-fold cross-validation
on tune (a document's answers in one fold) gives each variant's out-of-fold balanced accuracy and threshold;
the better variant is the kind's model. Without --held-out only tune rows are printed: the test and
hand-written splits are scored once per change of the method, with --held-out, which --write-card needs (the
card states its held-out figures, and cards/validity.json the rule checker's on the same answers). Prints per
set and split the balanced accuracy and AUROC of the rule checker, the word-overlap baseline (share chosen on
tune) and the kind's likelihood model; then a JSON line.
Usage: .venv/bin/python benchmarks/faithfulness_likelihood.py [--recompute] [--held-out [--write-card]]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DATA = Path(__file__).parent / "data"
SETS = {  # name -> (file, corpus kind, splits)
    "django": (DATA / "faithfulness_django.json", "documentation", ("tune", "test")),
    "maint-guide": (DATA / "faithfulness_maintguide.json", "documentation", ("tune", "test")),
    "node-api": (DATA / "faithfulness_nodeapi.json", "documentation", ("tune", "test")),
    "encyclopedia": (DATA / "faithfulness_real.json", "encyclopedia", ("tune", "test", "handwritten")),
}
CACHE = DATA / "likelihood_features.json"
CARD = Path(__file__).resolve().parent.parent / "eval" / "faithfulness" / "cards" / "likelihood-smollm2-135m.json"
EMBEDDER = "minilm-l6-v2"
"""The rule checker's embedder here (the sweep's default): the card and validity.json record it, and a run
with another embedder gets no validity figure from them."""
LIKELIHOOD = ["lp_mean", "lp_p10", "lp_min", "lq_mean", "pmi_mean", "pmi_p10", "pmi_min", "pmi_neg", "log_tokens"]
_CUT_TOKENS = 47


def auroc(labels: list[bool], scores: list[float]) -> float | None:
    """P(score of a supported answer > score of an unsupported one), ties counting half."""
    from scipy.stats import rankdata

    pos = sum(labels)
    neg = len(labels) - pos
    if not pos or not neg:
        return None
    ranks = rankdata(scores)
    return float((sum(r for r, y in zip(ranks, labels, strict=True) if y) - pos * (pos + 1) / 2) / (pos * neg))


def bacc(labels: list[bool], predicted: list[bool]) -> float | None:
    """Balanced accuracy: the mean of supported kept and unsupported caught."""
    pos = [p for y, p in zip(labels, predicted, strict=True) if y]
    neg = [not p for y, p in zip(labels, predicted, strict=True) if not y]
    rates = [sum(x) / len(x) for x in (pos, neg) if x]
    return sum(rates) / len(rates) if rates else None


def best_threshold(labels: list[bool], probs: list[float]) -> float:
    """The tune split's threshold with the best balanced accuracy (the lower of tied ones)."""
    grid = sorted(set(round(p, 4) for p in probs))
    return max(grid, key=lambda t: (bacc(labels, [p >= t for p in probs]) or 0.0, -t))


def load_cases() -> list[dict[str, Any]]:
    cases = []
    for name, (path, kind, splits) in SETS.items():
        if not path.exists():
            print(f"{name}: {path.name} missing; skipped", file=sys.stderr)
            continue
        for c in json.loads(path.read_text())["cases"]:
            if c["split"] in splits and c["label"] in ("supported", "unsupported"):
                cases.append(c | {"set": name, "kind": kind})
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recompute", action="store_true", help="score every case with the engine again")
    parser.add_argument("--features-only", action="store_true", help="fill the cache and stop (no fit, no table)")
    parser.add_argument("--cached-only", action="store_true", help="score only the cases already in the cache")
    parser.add_argument(
        "--held-out", action="store_true", help="score the test and hand-written splits too (once per change)"
    )
    parser.add_argument("--write-card", action="store_true", help=f"write the chosen models as {CARD.name}")
    args = parser.parse_args()
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from transformers import AutoTokenizer

    from benchmarks.faithfulness_validation import SHARES, overlap_verdicts
    from corpus.embed import build_embedder
    from eval.engine.bundled_models import smollm2_dir
    from eval.faithfulness.checker import ClaimChecker
    from eval.faithfulness.likelihood import TokenLogprobs, span_features
    from eval.prompt import PromptLayout

    generator_name = Path(str(smollm2_dir())).name
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir()))
    cases = load_cases()
    checker = ClaimChecker(build_embedder(EMBEDDER))
    cut = [len(tokenizer.encode(c["answer"], add_special_tokens=False)) >= _CUT_TOKENS for c in cases]
    start = time.perf_counter()
    results = checker.check_many([(c["answer"], c["context"] or "", c["question"]) for c in cases], cut)
    print(f"rule checker: {len(cases)} answers in {time.perf_counter() - start:.1f} s", file=sys.stderr)

    cache: dict[str, Any] = {} if args.recompute or not CACHE.exists() else json.loads(CACHE.read_text())
    key = {c["id"]: f"{generator_name}:{c['set']}:{c['id']}" for c in cases}
    todo = [c for c, r in zip(cases, results, strict=True) if r.claims and key[c["id"]] not in cache]
    if args.cached_only and todo:
        missing = {c["id"] for c in todo}
        print(f"--cached-only: {len(missing)} answers not scored yet are left out", file=sys.stderr)
        kept = [(c, r) for c, r in zip(cases, results, strict=True) if c["id"] not in missing]
        cases, results, todo = [c for c, _ in kept], [r for _, r in kept], []
    if todo:
        from eval.engine.generator import GeneratorConfig
        from eval.run.wiring import build_generator

        engine = build_generator(GeneratorConfig())
        layout = PromptLayout(engine.tokenizer)  # type: ignore[attr-defined]
        logprobs = TokenLogprobs(engine, layout.render, batch_size=16)
        start = time.perf_counter()
        for i in range(0, len(todo), 64):
            chunk = todo[i : i + 64]
            scored = logprobs.score([(c["question"], c["context"] or "", c["answer"]) for c in chunk])
            for c, (a, b) in zip(chunk, scored, strict=True):
                cache[key[c["id"]]] = {"with": a, "without": b}
            CACHE.write_text(json.dumps(cache, separators=(",", ":")))
            print(
                f"engine: {min(i + 64, len(todo))}/{len(todo)} answers in {time.perf_counter() - start:.0f} s",
                file=sys.stderr,
            )
        seconds = time.perf_counter() - start
        print(f"engine: {seconds / len(todo):.3f} s per answer ({len(todo)} answers)", file=sys.stderr)
        engine.close()
    if args.features_only:
        return
    logprobs_tok = TokenLogprobs(type("S", (), {"tokenizer": tokenizer})(), None)

    rows = []  # (case, label, features or None, rules share, overlap lexical min)
    for c, r in zip(cases, results, strict=True):
        feats = None
        if r.claims:
            got = cache[key[c["id"]]]
            _, _, content = logprobs_tok.answer_tokens(c["answer"])
            feats = span_features(got["with"], got["without"], content, range(len(content)))
        share = sum(v.supported for v in r.claims) / len(r.claims) if r.claims else 1.0
        rows.append((c, c["label"] == "supported", feats, share, r))

    def matrix(names: list[str], subset: list[Any]) -> Any:
        return np.array([[(f or {}).get(n, 0.0) if n != "rules" else s for n in names] for _, _, f, s, _ in subset])

    kinds = sorted({row[0]["kind"] for row in rows})
    fitted: dict[str, dict[str, Any]] = {}  # kind -> the chosen variant's model
    variants: dict[str, dict[str, dict[str, Any]]] = {}  # kind -> variant -> its model (both reported)
    cv_line: dict[str, dict[str, float]] = {}
    for kind in kinds:
        tune = [row for row in rows if row[0]["kind"] == kind and row[0]["split"] == "tune" and row[2] is not None]
        groups = np.array([f"{row[0]['set']}:{row[0].get('doc') or row[0]['question']}" for row in tune])
        y = np.array([row[1] for row in tune])
        cv_line[kind] = {}
        best: dict[str, Any] | None = None
        for variant, names in (("likelihood", LIKELIHOOD), ("combined", [*LIKELIHOOD, "rules"])):
            x = matrix(names, tune)
            oof = np.zeros(len(tune))  # out-of-fold probabilities: grouped by document, so no page is on both sides
            for train, held in GroupKFold(n_splits=5).split(x, y, groups):
                mean, scale = x[train].mean(axis=0), x[train].std(axis=0) + 1e-9
                fit = LogisticRegression(C=1.0, class_weight="balanced", max_iter=1000)
                fit.fit((x[train] - mean) / scale, y[train])
                oof[held] = fit.predict_proba((x[held] - mean) / scale)[:, 1]
            threshold = best_threshold(list(y), list(oof))
            cv = bacc(list(y), [p >= threshold for p in oof]) or 0.0
            cv_line[kind][variant] = cv
            mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
            fit = LogisticRegression(C=1.0, class_weight="balanced", max_iter=1000).fit((x - mean) / scale, y)
            model = {
                "variant": variant,
                "features": names,
                "mean": mean.tolist(),
                "scale": scale.tolist(),
                "coef": fit.coef_[0].tolist(),
                "intercept": float(fit.intercept_[0]),
                "threshold": threshold,
                "tune_cases": len(tune),
                "tune_sha256": hashlib.sha256(
                    "\n".join(f"{r[0]['set']}:{r[0]['id']}:{r[1]}" for r in tune).encode()
                ).hexdigest(),
                "cv_balanced_accuracy": round(cv, 4),
            }
            variants.setdefault(kind, {})[variant] = model
            if best is None or cv > best["cv_balanced_accuracy"]:
                best = model
        assert best is not None
        fitted[kind] = best
        print(
            f"{kind}: tune {len(tune)} answers ({int(y.sum())} supported), grouped 5-fold CV balanced accuracy "
            + ", ".join(f"{v} {b:.3f}" for v, b in cv_line[kind].items())
            + f"; chosen: {best['variant']}, threshold {best['threshold']:.4f}"
        )

    def prob(model: dict[str, Any], feats: dict[str, float] | None, share: float) -> float | None:
        if feats is None:
            return None
        z = model["intercept"] + sum(
            w * ((feats | {"rules": share})[n] - m) / s
            for n, m, s, w in zip(model["features"], model["mean"], model["scale"], model["coef"], strict=True)
        )
        return 1.0 / (1.0 + math.exp(-z))

    splits = ("tune", "test", "handwritten") if args.held_out else ("tune",)
    groups_: dict[tuple[str, str], list[Any]] = {}
    for row in rows:
        if row[0]["split"] in splits:
            groups_.setdefault((row[0]["set"], row[0]["split"]), []).append(row)
            groups_.setdefault((f"all-{row[0]['kind']}", row[0]["split"]), []).append(row)
    shares: dict[str, float] = {}
    table: dict[str, Any] = {}
    print(
        f"\n{'set':<20}{'split':<12}{'n':>5}{'sup':>5}  {'rules':>13}  {'overlap':>13}  {'likelihood':>13}"
        f"  {'combined':>13}  (chosen per kind: {', '.join(k + ' ' + m['variant'] for k, m in fitted.items())})"
    )
    print(f"{'':<42}  {'bacc  auroc':>13}  {'bacc  auroc':>13}  {'bacc  auroc':>13}  {'bacc  auroc':>13}")
    order = ["tune", "test", "handwritten"]
    for (name, split), subset in sorted(groups_.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]))):
        labels = [y for _, y, _, _, _ in subset]
        if name not in shares:  # the overlap baseline's share: chosen on this set's tune split
            tune_sub = groups_.get((name, "tune"), subset)
            tl = [y for _, y, _, _, _ in tune_sub]
            shares[name] = max(
                SHARES, key=lambda s: (bacc(tl, overlap_verdicts([r for *_, r in tune_sub], s)) or 0, -s)
            )
        line: dict[str, Any] = {"n": len(subset), "supported": sum(labels)}
        line["rules"] = (bacc(labels, [s == 1.0 for *_, s, _ in subset]), auroc(labels, [s for *_, s, _ in subset]))
        lex = [min((v.lexical for v in r.claims), default=1.0) for *_, r in subset]
        line["overlap"] = (bacc(labels, overlap_verdicts([r for *_, r in subset], shares[name])), auroc(labels, lex))
        for variant, model in variants[subset[0][0]["kind"]].items():
            ps = [prob(model, f, s) for _, _, f, s, _ in subset]
            # No claims found: no verdict (NULL in the product), which passes the answer, as the rules' NULL does.
            line[variant] = (
                bacc(labels, [p is None or p >= model["threshold"] for p in ps]),
                auroc(labels, [1.0 if p is None else p for p in ps]),
            )
            line["no_verdict"] = sum(p is None for p in ps)
        line["chosen"] = fitted[subset[0][0]["kind"]]["variant"]
        table[f"{name}/{split}"] = line

        def fmt(v: tuple[float | None, float | None]) -> str:
            return f"{v[0] or 0:.3f} {v[1] or 0:.3f}"

        print(
            f"{name:<20}{split:<12}{len(subset):>5}{sum(labels):>5}  {fmt(line['rules']):>13}"
            f"  {fmt(line['overlap']):>13}  {fmt(line['likelihood']):>13}  {fmt(line['combined']):>13}"
        )
    if args.write_card:
        if not args.held_out:
            sys.exit("--write-card needs --held-out: the card states its held-out figures")
        models = {}
        rules = {}
        for kind, model in fitted.items():
            v = table[f"all-{kind}/test"]
            sets = sorted(SETS[s][0].name for s in SETS if SETS[s][1] == kind and SETS[s][0].exists())
            models[kind] = model | {
                "validity": {
                    "balanced_accuracy": round(v[model["variant"]][0], 4),
                    "auroc": round(v[model["variant"]][1], 4),
                    "n": v["n"],
                    "split": "test",
                    "sets": sets,
                }
            }
            rules[kind] = {
                "balanced_accuracy": round(v["rules"][0], 4),
                "auroc": round(v["rules"][1], 4),
                "n": v["n"],
                "split": "test",
                "sets": sets,
            }
        card = {
            "method": "likelihood",
            "generator": generator_name,
            "models": models,
            "default_kind": "documentation",
            "embedder": EMBEDDER,
        }
        CARD.parent.mkdir(parents=True, exist_ok=True)
        CARD.write_text(json.dumps(card, indent=1) + "\n")
        (CARD.parent / "validity.json").write_text(json.dumps({"embedder": EMBEDDER, "rules": rules}, indent=1) + "\n")
        print(f"wrote {CARD} and validity.json ({datetime.now(UTC):%Y-%m-%d})", file=sys.stderr)
    print(json.dumps({"table": table, "cv": cv_line, "chosen": {k: m["variant"] for k, m in fitted.items()}}))


if __name__ == "__main__":
    main()
