"""Process-wide defaults for the backends (corpus/runtime.py)."""

from __future__ import annotations

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
