"""The `cribsheet` command line: a shell over the flows; every writing command prints where it wrote.

Each `flows/cli_*` module registers its commands on the one Typer app (`flows.app.app`) when it is imported;
the imports below are that list, in the order `cribsheet --help` shows the commands. `index`, `sweep` and
`gate` read an optional `--config FILE.yaml` (the same typed models the `prefect.yaml` deployments use);
flags given on the command line override the file.
"""

from __future__ import annotations

import os
import sys

# The order of these imports is the order of `cribsheet --help`.
# isort: off
import flows.cli_precompress  # noqa: F401  (registers precompress)
import flows.cli_project  # noqa: F401  (registers init, run and demo)
import flows.cli_results  # noqa: F401  (registers dataset, questions, report, gate and export)
import flows.cli_scorer  # noqa: F401  (registers train-scorer)
import flows.cli_index  # noqa: F401  (registers index and reclaim)
import flows.cli_sweep  # noqa: F401  (registers sweep, warm and tune-pruning)

# isort: on
from flows.app import app
from flows.cli_index import index
from flows.cli_sweep import sweep, tune_pruning, warm
from flows.terminal import err

__all__ = ["app", "index", "main", "sweep", "tune_pruning", "warm"]  # the commands that lived here stay importable


def main() -> None:
    """Console-script entry point."""
    if not sys.stdout.isatty() and not os.environ.get("COLUMNS") and not os.environ.get("TERMINAL_WIDTH"):
        import typer.rich_utils

        typer.rich_utils.MAX_WIDTH = 120  # --help in a pipe or a CI log: not squeezed into 80 columns
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
