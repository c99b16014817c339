"""Progress reporting for flows: the CLI installs a reporter; flows look it up at run time.

Callbacks cannot be flow parameters (Prefect serialises parameters), so they travel through here.
"""

from __future__ import annotations

from collections.abc import Callable

Reporter = Callable[[str, int, int], None]


def _silent(stage: str, done: int, total: int) -> None:
    return None


class _Holder:
    reporter: Reporter = _silent


def set_reporter(reporter: Reporter | None) -> None:
    """Install the reporter used by every flow in this process (None = silent)."""
    _Holder.reporter = reporter or _silent


def report(stage: str, done: int, total: int) -> None:
    """Forward one progress tick to the installed reporter."""
    _Holder.reporter(stage, done, total)
