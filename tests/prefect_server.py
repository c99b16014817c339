"""A real Prefect server on a free loopback port, for the tests and the fault suite that need one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from eval.faithfulness.judge_server import free_port

ROOT = Path(__file__).resolve().parent.parent
PREFECT = str(Path(sys.executable).with_name("prefect"))


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`cmd` in its own session (so `stop` reaches its children), output to `log`."""
    return subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group, SIGKILL after 30 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextmanager
def prefect_server(home: Path, timeout_s: float = 180) -> Iterator[tuple[dict[str, str], subprocess.Popen[bytes]]]:
    """A Prefect server with its own home under `home`; yields the environment that points at it (fake
    components registered) and the server process (a fault may stop it early).
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {
        "PREFECT_HOME": str(home / "prefect"),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "CRIBSHEET_HOME": str(ROOT),
        "CRIBSHEET_PLUGINS": "tests.fakes",
        "PYTHONPATH": str(ROOT),
    }
    log = home / "server.log"
    proc = start([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)], env, log)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("prefect server did not come up:\n" + log.read_text()[-2000:]) from None
                time.sleep(1)
        yield env, proc
    finally:
        stop(proc)
