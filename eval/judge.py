"""An LLM judge for users with a capable model: ragas' Faithfulness against an OpenAI-compatible endpoint
(for example vLLM serving a 7B model on a GPU). Offline defaults never need it: a 135M judge either fails
to parse or scores meaningless values (docs/design.md).
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from corpus.registry import Registry


class Judge(Protocol):
    """An LLM judge of faithfulness."""

    name: str

    def score(self, question: str, answer: str, contexts: Sequence[str]) -> float | None:
        """Faithfulness of `answer` to `contexts` in [0, 1]; None when there is no statement to check."""
        ...


JUDGES: Registry[Judge, None] = Registry("judge")
"""Registered LLM judges; `JudgeConfig.name` names one."""


class RagasJudgeConfig(BaseModel):
    """Where the judge model is served."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str
    """OpenAI-compatible endpoint, e.g. http://gpu-box:8000/v1 (`python -m vllm.entrypoints.openai.api_server`)."""
    model: str
    api_key_env: str = "CRIBSHEET_JUDGE_API_KEY"
    """Environment variable holding the API key (vLLM accepts any value)."""
    timeout_s: float = 120.0


class JudgeConfig(RagasJudgeConfig):
    """The judge: a registered name and where its model is served."""

    name: str = "ragas-faithfulness"
    """Registered judge name."""


def _import_ragas() -> None:
    """Ragas 0.4.x imports `langchain_community.chat_models.vertexai`, which langchain-community 0.4.2 no
    longer ships; ragas only uses the class in isinstance checks, so a stand-in module lets it import.
    """
    import sys
    import types

    name = "langchain_community.chat_models.vertexai"
    try:
        __import__(name)
    except ModuleNotFoundError:
        shim = types.ModuleType(name)
        shim.ChatVertexAI = type("ChatVertexAI", (), {})  # type: ignore[attr-defined]
        sys.modules[name] = shim


class RagasFaithfulnessJudge:
    """ragas `Faithfulness` (statement extraction + NLI by the judge model); score in [0, 1] or None."""

    name = "ragas_faithfulness"

    def __init__(self, config: RagasJudgeConfig) -> None:
        from openai import AsyncOpenAI

        _import_ragas()
        from ragas.llms.base import llm_factory
        from ragas.metrics.collections import Faithfulness

        client = AsyncOpenAI(
            base_url=config.base_url,
            api_key=os.environ.get(config.api_key_env, "EMPTY"),
            timeout=config.timeout_s,
            max_retries=1,
        )
        self.metric: Any = Faithfulness(llm=llm_factory(config.model, client=client))

    def score(self, question: str, answer: str, contexts: Sequence[str]) -> float | None:
        """Faithfulness of `answer` to `contexts`; None when the judge finds no statement to check."""
        result = asyncio.run(
            self.metric.ascore(user_input=question, response=answer, retrieved_contexts=list(contexts))
        )
        value = float(result.value)
        return None if math.isnan(value) else value


@JUDGES.register("ragas-faithfulness", RagasJudgeConfig)
def _ragas(config: RagasJudgeConfig, deps: None) -> Judge:
    """Ragas Faithfulness by a model behind an OpenAI-compatible endpoint."""
    return RagasFaithfulnessJudge(config)
