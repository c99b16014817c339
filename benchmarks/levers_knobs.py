"""Parts of benchmarks/levers.py: the engine's prefill knobs and cited structured answers, each measured
side by side against the default in the same run (imported by levers.py; running this file does nothing)."""

from __future__ import annotations

import statistics
import time
from typing import Any

KNOBS: list[tuple[str, dict[str, Any]]] = [
    ("default", {}),
    ("chunked_prefill_off", {"enable_chunked_prefill": False}),
    ("batched_tokens_256", {"max_num_batched_tokens": 256}),
    ("kv_cache_fp8", {"kv_cache_dtype": "fp8"}),
    ("max_model_len_half", {}),  # filled in by knobs(): half the default, when the prompts still fit
]
"""Knob variants: each is one engine, loaded after the previous one is closed."""


def knobs(base: Any, prompts: list[str], golds: list[list[str]], prefix: str, n_probe: int) -> dict[str, Any]:
    """Probe TTFT (serial, cache reset), batch throughput and answer recall per knob variant, as ratios to the
    default engine. A variant the engine refuses on this machine is reported with its error, not dropped."""
    from eval.metrics import answer_contains
    from eval.run.wiring import build_generator

    results: dict[str, dict[str, Any]] = {}
    for label, change in KNOBS:
        if label == "max_model_len_half":
            change = {"max_model_len": base.max_model_len // 2}
        try:
            gen = build_generator(base.model_copy(update=change))
        except Exception as exc:  # the engine refused this knob here: a finding, reported
            results[label] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
            continue
        try:
            if (
                gen.count_tokens(max(prompts, key=len)) + base.max_tokens
                > gen.llm.llm_engine.model_config.max_model_len
            ):
                results[label] = {"error": "the prompts do not fit this max_model_len"}
                continue
            ttfts = []
            for p in prompts[:n_probe]:
                gen.reset_cache()
                gen.warm(prefix)
                ttfts.append(gen.probe(p).ttft_s)
            gen.reset_cache()
            gen.warm(prefix)
            start = time.perf_counter()
            outs = gen.generate(prompts)
            seconds = time.perf_counter() - start
            recall = statistics.fmean(answer_contains(o.text, g) for o, g in zip(outs, golds, strict=True))
            tokens = sum(o.prompt_tokens for o in outs)
            results[label] = {
                "probe_ttft_s": statistics.fmean(t for t in ttfts if t is not None),
                "prompt_tokens_per_s": tokens / seconds,
                "answer_recall": recall,
            }
        except Exception as exc:  # loaded, but failed on these prompts: reported, the other knobs go on
            results[label] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
        finally:
            gen.close()
    base_row = results.get("default", {})
    print(f"{'engine knob':<22}{'probe TTFT s':>13}{'TTFT x':>8}{'tokens/s':>10}{'thru x':>8}{'ans rec':>8}")
    figures: dict[str, Any] = {}
    for label, row in results.items():
        if "error" in row:
            print(f"{label:<22} refused by the engine here: {row['error']}")
            figures[f"knob_{label}_error"] = row["error"]
            continue
        ttft_x = base_row["probe_ttft_s"] / row["probe_ttft_s"] if base_row else float("nan")
        thru_x = row["prompt_tokens_per_s"] / base_row["prompt_tokens_per_s"] if base_row else float("nan")
        print(
            f"{label:<22}{row['probe_ttft_s']:>13.3f}{ttft_x:>8.2f}{row['prompt_tokens_per_s']:>10.0f}"
            f"{thru_x:>8.2f}{row['answer_recall']:>8.3f}"
        )
        figures |= {
            f"knob_{label}_ttft_speedup_ratio": round(ttft_x, 3),
            f"knob_{label}_throughput_ratio": round(thru_x, 3),
            f"knob_{label}_answer_recall": round(row["answer_recall"], 3),
        }
    return figures


def cited(gen: Any, layout: Any, rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Every compressor's prompts again with the cited-json output: schema-valid rate and citation precision
    and recall against the gold documents."""
    from eval.metrics import answer_contains
    from eval.run.citations import CITED_INSTRUCTION, citation_part, cited_schema

    figures: dict[str, Any] = {}
    print(f"{'cited-json':<15}{'valid':>7}{'cit P':>7}{'cit R':>7}{'ans rec':>8}")
    for name, items in rows.items():
        prompts = [layout.render(r["context"], r["question"], CITED_INSTRUCTION) for r in items]
        outs = gen.generate(prompts, [cited_schema(r["n_passages"]) for r in items])
        parts = [citation_part(o.text, r["docs"], r["gold_docs"]) for o, r in zip(outs, items, strict=True)]
        valid = statistics.fmean(bool(p.schema_valid) for _, p in parts)
        precision = [p.citation_precision for _, p in parts if p.citation_precision is not None]
        recall = [p.citation_recall for _, p in parts if p.citation_recall is not None]
        answers = statistics.fmean(answer_contains(a, r["golds"]) for (a, _), r in zip(parts, items, strict=True))
        # No valid citation at all: "-" and null, never NaN.
        p_mean = round(statistics.fmean(precision), 3) if precision else None
        r_mean = round(statistics.fmean(recall), 3) if recall else None
        p_text, r_text = (f"{v:.3f}" if v is not None else "-" for v in (p_mean, r_mean))
        print(f"{name:<15}{valid:>7.3f}{p_text:>7}{r_text:>7}{answers:>8.3f}")
        key = name.replace("-", "_")
        figures |= {
            f"cited_{key}_schema_valid_rate": round(valid, 3),
            f"cited_{key}_citation_precision": p_mean,
            f"cited_{key}_citation_recall": r_mean,
            f"cited_{key}_answer_recall": round(answers, 3),
        }
    return figures
