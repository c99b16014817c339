"""Process-wide defaults for the backends (corpus/runtime.py)."""

from __future__ import annotations

import json
import logging


class _RecordingHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def emit(self, record: logging.LogRecord) -> None:
        pass

    def close(self) -> None:
        self.closed = True
        super().close()


def test_starting_vllm_leaves_the_process_log_handlers_alone() -> None:
    """vLLM's default logging setup runs a dictConfig that closes every handler of the process under
    logging's lock: inside a Prefect flow run that deadlocked the sweep with Prefect's API log handler.
    With cribsheet's defaults (set for every test by conftest) an engine start must not touch them.
    """
    from vllm.config.logging import LoggingConfig
    from vllm.logger import configure_logging_if_needed

    handler = _RecordingHandler()
    logging.getLogger().addHandler(handler)
    try:
        config = LoggingConfig()
        configure_logging_if_needed(config)
        assert config.configure_logging is False
        assert not handler.closed and handler in logging.getLogger().handlers
    finally:
        logging.getLogger().removeHandler(handler)


def test_a_stored_hardware_record_reads_as_cpu_cores_and_gpus() -> None:
    """One wording for the machine, wherever it is shown (the gate's latency note, the HTML report)."""
    from corpus.runtime import hardware, hardware_text

    assert hardware_text('{"cpu": "EPYC", "cores": 2, "gpus": []}') == "EPYC, 2 cores"
    assert hardware_text('{"cpu": "EPYC", "cores": 16, "gpus": ["H200", "H200"]}') == "EPYC, 16 cores, H200, H200"
    assert hardware_text("{}") == "unknown CPU, ? cores"
    assert hardware_text(None) == hardware_text("") == "hardware not recorded"
    here = hardware()
    assert hardware_text(json.dumps(here)).startswith(f"{here['cpu']}, {here['cores']} cores")
