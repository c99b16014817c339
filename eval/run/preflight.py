"""What a sweep can check before any model loads or any flow starts: the question file parses, an existing
results file opens, the index exists and has what the grid needs, a model verifier exists and names its
support label. A mistake seen here costs a second, not
an engine start.
"""

from __future__ import annotations

from corpus.snapshot import read_spec
from eval.compress.pruned import NEEDS_SENTENCE_VECTORS, missing_sentence_vectors
from eval.faithfulness.verifier import check_verifier
from eval.run.sweep import load_questions
from eval.settings import SweepConfig
from eval.store import DuckDBStore


def check_sweep(config: SweepConfig) -> None:
    """Raise the first input error the sweep would meet later (a one-line CribsheetError naming the file)."""
    load_questions(config)
    if config.store_path.exists():  # an existing results file must open (not truncated, not something else)
        DuckDBStore(config.store_path, read_only=True).check_readable()
    spec = read_spec(config.index_path)
    for name in sorted({c.compressor for c in config.grid.compressions} & NEEDS_SENTENCE_VECTORS):
        if not spec.sentence_vectors:
            raise missing_sentence_vectors(name)
    if config.verifier is not None:  # the model exists and says which label means "supported"
        check_verifier(config.verifier)
