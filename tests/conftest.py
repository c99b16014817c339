"""Shared fixtures: an isolated Prefect home and small corpora written to temp folders."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corpus.runtime import QUIET_OFFLINE_DEFAULTS

# Prefect reads its settings once, when first imported (collecting the flow tests), before any fixture runs:
# what it must see is set here, at import. At INFO its temporary server logs "Stopping ..." at exit into
# pytest's closed output ("Logging error"); a home of its own per test process keeps the user's ~/.prefect
# out of it; and a fresh home's migrations take about 18 s, near the default 20 s the temporary server is
# given to start (on a busy machine they take longer).
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")
PREFECT_TEST_HOME = Path(tempfile.mkdtemp(prefix="cribsheet-test-prefect-"))
atexit.register(shutil.rmtree, PREFECT_TEST_HOME, ignore_errors=True)
os.environ["PREFECT_HOME"] = str(PREFECT_TEST_HOME)
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "180"


@pytest.fixture(autouse=True, scope="session")
def _isolated_env() -> None:
    mp = pytest.MonkeyPatch()
    for key, value in QUIET_OFFLINE_DEFAULTS.items():
        mp.setenv(key, value)


@pytest.fixture(autouse=True)
def _quiet_machine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests that time fakes read no foreign load: the other pytest worker (`-n 2`) and whatever else runs on
    a CI box are foreign processes, which the latency phase's load check would rightly see. A test marked
    `real_load` measures the machine as it is (the meter's own tests)."""
    if request.node.get_closest_marker("real_load") is None:
        monkeypatch.setattr("eval.run.load.LoadMeter.foreign", lambda self, mark: 0.0)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


TINY_DOCS = [
    {
        "id": "K2",
        "title": "K2",
        "text": "K2 is the second-highest mountain on Earth, at 8,611 metres above sea level. "
        "It lies in the Karakoram range.",
    },
    {
        "id": "Asia",
        "title": "Asia",
        "text": "Asia is the largest continent in the world by both land area and "
        "population. It covers an area of more than 44 million square kilometres.",
    },
    {
        "id": "Liverpool",
        "title": "Liverpool",
        "text": "Liverpool is a port city in Merseyside, England. The Beatles formed in Liverpool in 1960.",
    },
    {
        "id": "Paris",
        "title": "Paris",
        "text": "Paris is the capital and largest city of France. The Eiffel Tower was completed in 1889.",
    },
    {
        "id": "Nile",
        "title": "Nile",
        "text": "The Nile is a major north-flowing river in northeastern Africa. It flows into the Mediterranean Sea.",
    },
]

TINY_QUESTIONS = [
    {"id": "q1", "question": "How high is K2?", "answers": ["8,611 metres", "8611 m"], "gold_doc_ids": ["K2"]},
    {"id": "q2", "question": "What is the largest continent?", "answers": ["Asia"], "gold_doc_ids": ["Asia"]},
    {"id": "q3", "question": "Where did the Beatles form?", "answers": ["Liverpool"], "gold_doc_ids": ["Liverpool"]},
    {
        "id": "q4",
        "question": "When was the Eiffel Tower completed?",
        "answers": ["1887"],
        "gold_doc_ids": ["Paris"],
        "answerable": False,
    },
]


@pytest.fixture
def tiny_corpus(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "corpus.jsonl", TINY_DOCS)


@pytest.fixture
def tiny_questions(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "questions.jsonl", TINY_QUESTIONS)


# --- real components, built once per test run -------------------------------------------------------------
# Each is session-scoped; the bundled dataset is shared by the xdist workers too (built under a file lock).


@pytest.fixture(scope="session")
def bundled_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled dataset (corpus, questions, manifest), built from the installed packages once."""
    from filelock import FileLock

    from corpus.bundled import MANIFEST_FILE, build_bundled

    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    target = root / "bundled"
    with FileLock(str(root / "bundled.lock")):
        if not (target / MANIFEST_FILE).exists():  # the manifest is written last
            build_bundled(target)
    return target


@pytest.fixture(scope="session")
def minilm() -> Any:
    """The real embedder (all-MiniLM-L6-v2 from its package)."""
    from corpus.embed import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


@pytest.fixture(scope="session")
def engine() -> Iterator[Any]:
    """One real vLLM engine (the bundled SmolLM2), small enough to sit beside the other tests."""
    from eval.engine.generator import GeneratorConfig
    from eval.run.wiring import build_generator

    gen = build_generator(GeneratorConfig(max_model_len=2048, kv_cache_gib=1, max_tokens=16))
    yield gen
    gen.close()


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    """One local Ray cluster of 2 CPUs for the whole run (cribsheet's `ray_cluster` reuses a connected one)."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
