"""LLM judges for users with a capable model: ragas' Faithfulness and a claim-level entailment prompt,
against an OpenAI-compatible endpoint that is either given (`--judge-url`) or started here as a vLLM server
subprocess (`--judge vllm:MODEL`). Offline defaults never need one: a 135M judge only proves the plumbing
(docs/faithfulness.md says which judge to use on a GPU).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from corpus.registry import Registry
from eval.faithfulness.judge_server import JudgeServerError, ServerConfig, ServerProcess, free_port, server_command


class Judge(Protocol):
    """An LLM judge of faithfulness."""

    name: str

    def score(self, question: str, answer: str, contexts: Sequence[str]) -> float | None:
        """Faithfulness of `answer` to `contexts` in [0, 1]; None when there is no statement to check."""
        ...

    def entails(self, claim: str, context: str) -> tuple[bool | None, str]:
        """Whether `context` supports `claim`, and the status: ok | unparsed: <reply> | error: <message>."""
        ...

    def close(self) -> None:
        """Release what the judge started (a server process)."""
        ...


@dataclass(frozen=True)
class JudgeDeps:
    """What a judge may need from the sweep: where to log, and the bundled model's folder."""

    log_dir: Path
    default_model: str | None = None


JUDGES: Registry[Judge, JudgeDeps] = Registry("judge")
"""Registered LLM judges; `JudgeConfig.name` names one."""


class _Requests(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    api_key_env: str = "CRIBSHEET_JUDGE_API_KEY"
    """Environment variable holding the API key (vLLM accepts any value)."""
    timeout_s: float = 120.0
    max_tokens: int = Field(default=512, ge=1)
    """Longest reply ragas may ask for (a statement list); the entailment prompt needs 3 tokens."""


class RagasJudgeConfig(_Requests):
    """A judge model already served at an OpenAI-compatible endpoint."""

    base_url: str
    """e.g. http://gpu-box:8000/v1 (`vllm serve MODEL`)."""
    model: str


class ServedJudgeConfig(_Requests):
    """A judge model that cribsheet serves itself for the run (vLLM server subprocess)."""

    model: str | None = None
    """Hugging Face folder or hub id; None = the bundled SmolLM2-135M-Instruct (plumbing only)."""
    server: ServerConfig = Field(default_factory=ServerConfig)


class JudgeConfig(_Requests):
    """The sweep's judge: a registered name (ragas-faithfulness at `base_url`, or vllm: served here)."""

    name: str = "ragas-faithfulness"
    base_url: str | None = None
    model: str | None = None
    server: ServerConfig = Field(default_factory=ServerConfig)


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


ENTAILMENT_PROMPT = (
    "Context:\n{context}\n\nStatement: {claim}\n\n"
    "Does the context support the statement? Answer with one word: yes or no."
)
"""The claim-level prompt: the judge sees the whole final context, not the checker's chosen span."""

_VERDICT = re.compile(r"^\W*(yes|no)\b", re.I)


def parse_verdict(reply: str) -> tuple[bool | None, str]:
    """yes/no at the start of a reply; anything else is `unparsed` (never guessed)."""
    m = _VERDICT.match(reply)
    if m is None:
        return None, f"unparsed: {reply.strip()[:200]}"
    return m.group(1).lower() == "yes", "ok"


class RagasFaithfulnessJudge:
    """ragas `Faithfulness` (statement extraction + NLI by the judge model) and a claim entailment prompt."""

    name = "ragas_faithfulness"

    def __init__(self, config: RagasJudgeConfig) -> None:
        from openai import AsyncOpenAI, OpenAI

        _import_ragas()
        from ragas.llms.base import llm_factory
        from ragas.metrics.collections import Faithfulness

        key = os.environ.get(config.api_key_env, "EMPTY")
        client = AsyncOpenAI(base_url=config.base_url, api_key=key, timeout=config.timeout_s, max_retries=1)
        self.metric: Any = Faithfulness(llm=llm_factory(config.model, client=client, max_tokens=config.max_tokens))
        self.client = OpenAI(base_url=config.base_url, api_key=key, timeout=config.timeout_s, max_retries=1)
        self.model = config.model

    def score(self, question: str, answer: str, contexts: Sequence[str]) -> float | None:
        """Faithfulness of `answer` to `contexts`; None when the judge finds no statement to check."""
        result = asyncio.run(
            self.metric.ascore(user_input=question, response=answer, retrieved_contexts=list(contexts))
        )
        value = float(result.value)
        return None if math.isnan(value) else value

    def entails(self, claim: str, context: str) -> tuple[bool | None, str]:
        """The judge's yes/no on `claim` against `context` (greedy, 3 tokens)."""
        try:
            reply = self.client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": ENTAILMENT_PROMPT.format(context=context, claim=claim)}],
                max_tokens=3,
                temperature=0.0,
            )
        except Exception as exc:
            return None, f"error: {type(exc).__name__}: {exc}"[:500]
        return parse_verdict(reply.choices[0].message.content or "")

    def close(self) -> None:
        """Nothing to stop: the endpoint belongs to the user."""
        self.client.close()


PORT_ATTEMPTS = 3
"""Ports tried when the one chosen was taken before the judge server bound it."""


class ServedJudge(RagasFaithfulnessJudge):
    """The same judge against a vLLM server subprocess started for the run and stopped by `close()`."""

    def __init__(self, config: ServedJudgeConfig, deps: JudgeDeps) -> None:
        model = config.model or deps.default_model
        if model is None:
            raise ValueError("judge 'vllm': no model given and no bundled model (write --judge vllm:MODEL)")
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
        for attempt in range(1, PORT_ATTEMPTS + 1):
            # A free port can be taken between choosing it and the server binding it: then another port.
            port = free_port()
            self.server = ServerProcess(
                server_command(model, "judge", port, config.server),
                f"http://127.0.0.1:{port}/v1",
                deps.log_dir / f"judge-server-{stamp}-{attempt}.log",
                config.server,
            )
            try:
                self.server.start()
                break
            except JudgeServerError:
                taken = "address already in use" in self.server.log_path.read_text(errors="replace").lower()
                if not taken or attempt == PORT_ATTEMPTS:
                    raise
        try:
            endpoint = RagasJudgeConfig(
                base_url=self.server.base_url,
                model="judge",
                **config.model_dump(include={"api_key_env", "timeout_s", "max_tokens"}),
            )
            super().__init__(endpoint)
        except BaseException:
            self.server.stop()
            raise

    def close(self) -> None:
        """Stop the server process (its whole process group)."""
        super().close()
        self.server.stop()


@JUDGES.register("ragas-faithfulness", RagasJudgeConfig)
def _ragas(config: RagasJudgeConfig, deps: JudgeDeps) -> Judge:
    """Ragas Faithfulness and claim entailment by a model behind an OpenAI-compatible endpoint."""
    return RagasFaithfulnessJudge(config)


@JUDGES.register("vllm", ServedJudgeConfig, arg="model")
def _served(config: ServedJudgeConfig, deps: JudgeDeps) -> Judge:
    """Ragas Faithfulness and claim entailment by a vLLM server that cribsheet starts and stops."""
    return ServedJudge(config, deps)
