"""A vLLM OpenAI-compatible server run as a subprocess for the LLM judge: started on a free loopback port,
waited for until it answers, stopped (its whole process group) when the run ends or fails.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from pydantic import BaseModel, ConfigDict

from corpus.errors import CribsheetError
from eval.engine.precision import cpu_engine_env, vllm_dtype


class JudgeServerError(CribsheetError):
    """The judge server did not come up (or could not be started)."""


class ServerConfig(BaseModel):
    """How the judge's vLLM server is started; GPU settings apply on a CUDA build, the KV cache size on CPU."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dtype: str = "auto"
    """Judge precision; auto: bfloat16 on a CPU only where it is native, else float32 (`eval/engine/precision.py`)."""
    max_model_len: int = 4096
    gpu_memory_utilization: float = 0.3
    """Share of the GPU for the judge (the sweep's own engine holds 0.5 of it by default)."""
    kv_cache_gib: int = 1
    """CPU KV cache size (VLLM_CPU_KVCACHE_SPACE) of the server process."""
    startup_timeout_s: float = 900.0
    """Seconds to wait for the server to answer /v1/models (a CPU load takes about a minute)."""
    extra_args: tuple[str, ...] = ()
    """More `vllm serve` options, e.g. ("--tensor-parallel-size", "2")."""


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(model: str, name: str, port: int, config: ServerConfig) -> list[str]:
    """The vLLM OpenAI-compatible server's command line for `model`, served under `name`."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--served-model-name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        vllm_dtype(config.dtype),
        "--max-model-len",
        str(config.max_model_len),
        "--gpu-memory-utilization",
        str(config.gpu_memory_utilization),
        "--enforce-eager",
        "--seed",
        "0",
        *config.extra_args,
    ]


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    useful = [line.strip() for line in text if line.strip()]
    return " | ".join(useful[-lines:])[-600:]


class ServerProcess:
    """A server subprocess with its log; `with ServerProcess(cmd, url, log) as p:` waits until it answers."""

    def __init__(self, command: list[str], base_url: str, log_path: Path, config: ServerConfig) -> None:
        self.command = command
        self.base_url = base_url
        self.log_path = log_path
        self.config = config
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the process and wait until GET {base_url}/models answers; a clear error when it does not."""
        env = dict(os.environ)
        env["VLLM_CPU_KVCACHE_SPACE"] = str(self.config.kv_cache_gib)  # the judge's own, not the sweep's
        cpu_engine_env(env, self.config.kv_cache_gib)
        # A process of its own (no flow-run log handlers to deadlock on): its log keeps vLLM's request lines.
        env["VLLM_CONFIGURE_LOGGING"] = "1"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        try:
            self.proc = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        except OSError as exc:
            raise JudgeServerError(f"judge server could not start ({self.command[0]}): {exc}") from exc
        finally:
            log.close()
        deadline = time.monotonic() + self.config.startup_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                self.proc = None
                raise JudgeServerError(
                    f"judge server exited with code {code} before it came up: {_tail(self.log_path)} "
                    f"(log: {self.log_path})"
                )
            if self.ready():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise JudgeServerError(
                    f"judge server did not answer {self.base_url}/models within {self.config.startup_timeout_s:.0f}"
                    f" s (log: {self.log_path})"
                )
            time.sleep(0.5)

    def ready(self) -> bool:
        """Whether the server answers its model list."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, grace_s: float = 30.0) -> int | None:
        """SIGTERM to the server's process group, SIGKILL after `grace_s`; returns its exit code."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                return proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        return proc.poll()

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
