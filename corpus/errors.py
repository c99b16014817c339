"""Errors meant for people: each says what was wrong and where."""


class CribsheetError(Exception):
    """A user-facing error; the CLI prints its message on one line and exits non-zero."""


class InputFileError(CribsheetError):
    """A corpus or question file is missing or malformed."""

    def __init__(self, path: object, problem: str, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.line = line
