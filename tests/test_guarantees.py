"""The register of promises (docs/guarantees.md): every proof it names exists, and every sentence of
README.md and docs/*.md that sounds like a promise is in it.

A promise sentence is one with a word from PROMISE_WORDS. It is covered when it contains the quote of a
register entry for its file: a promise with its proofs, a statement the register marks as not proven by a
test (with what holds it instead), or a sentence the register lists as no promise, with why. A new promise
in the docs therefore fails here until someone says what proves it, and a proof renamed or deleted fails
here too.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REGISTER = ROOT / "docs" / "guarantees.md"

# Words that turn a sentence into a promise about behaviour, or make it sound like one.
PROMISE_WORDS = re.compile(
    r"\b(never|always|identical|cannot|can[’']t|only|same rows|refuse[sd]?|guarantee[sd]?)\b", re.IGNORECASE
)
FILE_NAMES = re.compile(r"\]\([^)]*\)|[\w./-]+\.(?:md|py|json|yaml|jsonl)\b")
# The register's sections: each holds one table whose rows cover sentences.
PROMISES, UNPROVEN, NOT_PROMISES = "Promises", "Stated, not proven by a test", "Not a promise"
MIN_QUOTE = 12
NODE_ID = re.compile(r"^(tests/[\w/]+\.py)::(?:(\w+)::)?(\w+)(\[.*\])?$")
FAULT_ROW = re.compile(r"^benchmarks/faults\.py::(\w+)$")


def documented_files() -> list[Path]:
    """The documents whose promises the register keeps: README.md and docs/*.md, the register aside."""
    return [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p != REGISTER)]


def sentences(markdown: str) -> list[str]:
    """The prose sentences of a markdown text, whitespace collapsed; code blocks are left out.

    Paragraphs, list items, headings and table rows are cut apart first, so a sentence never runs from
    one into the next; within one, a sentence ends at '.', '!' or '?' before a space and a capital,
    a backtick, a quote or a parenthesis.
    """
    blocks: list[list[str]] = []
    fenced = False
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            blocks.append([])
            continue
        if fenced or not stripped or re.fullmatch(r"\|[\s|:-]*\|", stripped):
            blocks.append([])
            continue
        if not blocks or re.match(r"(#+ |[-*] |\d+\. |\|)", stripped):
            blocks.append([])
        blocks[-1].append(stripped)
        if stripped.startswith("#"):  # a heading is a block of its own, even with text right below it
            blocks.append([])
    out: list[str] = []
    for block in blocks:
        text = " ".join(block).strip()
        out += [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`\"“(*\[])", text) if s]
    return out


def promise_sentences(markdown: str) -> list[str]:
    """The sentences with a promise word; a link's target and a file name (`docs/guarantees.md`) are no words."""
    return [s for s in sentences(markdown) if PROMISE_WORDS.search(FILE_NAMES.sub(" ", s))]


@dataclass(frozen=True)
class Entry:
    """One row of the register: its section, id (none in "Not a promise"), file, quote, proofs and note (why
    a sentence promises nothing, or what holds a statement no test proves)."""

    section: str
    id: str
    file: str
    quote: str
    proofs: tuple[str, ...]
    note: str


def _cells(row: str) -> list[str]:
    """A markdown table row's cells; an escaped pipe (\\|) stays inside its cell."""
    cells = re.split(r"(?<!\\)\|", row.strip().strip("|"))
    return [c.strip().replace("\\|", "|") for c in cells]


def _unquote(cell: str, where: str) -> str:
    """The text between a cell's outer double quotes, whitespace collapsed."""
    assert len(cell) > 2 and cell[0] == cell[-1] == '"', f"{where}: a quote is written in double quotes: {cell!r}"
    return " ".join(cell[1:-1].split())


def read_register(text: str) -> list[Entry]:
    """Every row of the register's three tables, by the columns its header names."""
    entries: list[Entry] = []
    section, header = "", list[str]()
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            section, header = line[3:].strip(), []
            continue
        if not line.startswith("|") or re.fullmatch(r"\|[\s|:-]*\|", line.strip()):
            continue
        if not header:
            header = [c.lower() for c in _cells(line)]
            continue
        row = dict(zip(header, _cells(line), strict=True))
        where = f"docs/guarantees.md line {n}"
        proofs = tuple(re.findall(r"`([^`]+)`", row.get("proof", "")))
        note = row.get("why", row.get("what holds it instead", ""))
        entries.append(Entry(section, row.get("id", ""), row["file"], _unquote(row["quote"], where), proofs, note))
    return entries


def register() -> list[Entry]:
    """The register as committed."""
    return read_register(REGISTER.read_text(encoding="utf-8"))


def unregistered(file: str, markdown: str, entries: list[Entry]) -> list[str]:
    """The promise sentences of one document that no entry's quote covers."""
    quotes = [e.quote for e in entries if e.file == file]
    return [s for s in promise_sentences(markdown) if not any(q in s for q in quotes)]


def _defined_tests(path: Path) -> set[str]:
    """Test function names a test file defines, at module level and as `Class::method`."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {
                f"{node.name}::{m.name}" for m in node.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
            }
    return names


def _fault_rows() -> set[str]:
    """The fault functions the fault suite runs: those named in its FAULTS list."""
    for node in ast.parse((ROOT / "benchmarks" / "faults.py").read_text(encoding="utf-8")).body:
        targets: list[ast.expr]
        if isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "FAULTS" for t in targets) and isinstance(value, ast.List):
            return {e.id for e in value.elts if isinstance(e, ast.Name)}
    raise AssertionError("benchmarks/faults.py has no FAULTS list")


def missing_proof(proof: str) -> str | None:
    """Why a proof named in the register does not exist, or None when it does."""
    if fault := FAULT_ROW.match(proof):
        return None if fault[1] in _fault_rows() else "no such row in benchmarks/faults.py's FAULTS"
    node = NODE_ID.match(proof)
    if not node:
        return "neither a pytest node id (tests/...py::test_name) nor benchmarks/faults.py::row"
    path = ROOT / node[1]
    if not path.is_file():
        return f"{node[1]} does not exist"
    name = f"{node[2]}::{node[3]}" if node[2] else node[3]
    if not name.split("::")[-1].startswith("test_") or name not in _defined_tests(path):
        return f"{node[1]} defines no test {name}"
    return None


def test_the_register_has_its_three_sections_unique_ids_and_says_why() -> None:
    entries = register()
    sections = {e.section for e in entries}
    assert sections == {PROMISES, UNPROVEN, NOT_PROMISES}, f"sections found: {sorted(sections)}"
    ids = [e.id for e in entries if e.section != NOT_PROMISES]
    assert all(re.fullmatch(r"[GS]\d{2,3}", i) for i in ids), ids
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
    # A short quote would cover any later sentence that happens to contain it.
    assert not [e.quote for e in entries if len(e.quote) < MIN_QUOTE], f"quotes under {MIN_QUOTE} characters"
    unexplained = [e.id or e.quote for e in entries if e.section != PROMISES and e.note in ("", "TODO", "PENDING")]
    assert not unexplained, f"rows outside Promises must say why no test proves them: {unexplained}"


def test_every_promise_names_a_proof_and_every_proof_exists() -> None:
    problems = []
    for e in register():
        if e.section != PROMISES:
            continue
        if not e.proofs:
            problems.append(f"{e.id}: no proof named")
        problems += [f"{e.id}: `{p}`: {why}" for p in e.proofs if (why := missing_proof(p))]
    assert not problems, "docs/guarantees.md names proofs that do not exist:\n" + "\n".join(problems)


def test_every_quote_is_found_in_its_file() -> None:
    """A quote that no longer occurs in one sentence of its file is a stale entry."""
    problems = []
    for e in register():
        path = ROOT / e.file
        if not path.is_file() or path == REGISTER:
            problems.append(f"{e.id or e.section}: no such document {e.file}")
        elif not any(e.quote in s for s in sentences(path.read_text(encoding="utf-8"))):
            problems.append(f'{e.id or e.section}: {e.file} has no sentence containing "{e.quote}"')
    assert not problems, "docs/guarantees.md quotes sentences that are gone:\n" + "\n".join(problems)


def test_every_promise_sentence_in_the_docs_is_in_the_register() -> None:
    entries = register()
    problems = []
    for path in documented_files():
        file = path.relative_to(ROOT).as_posix()
        problems += [f'{file}: "{s}"' for s in unregistered(file, path.read_text(encoding="utf-8"), entries)]
    assert not problems, (
        "These sentences read as promises (a word such as never, only, identical, refused) and docs/guarantees.md "
        "has no entry quoting them: add each to Promises with a test or fault row that proves it, to Stated, not "
        "proven by a test, or to Not a promise with why; or rewrite it to what is true.\n" + "\n".join(problems)
    )


def test_a_new_promise_is_named_with_its_file_and_the_documents_code_is_not_read() -> None:
    entries = read_register(
        "## Promises\n| id | promise | file | quote | proof |\n|---|---|---|---|---|\n"
        '| G01 | kept | README.md | "is never lost" | `tests/test_guarantees.py::test_x` |\n'
    )
    doc = (
        "A row is never lost.\nA setting is always retried. Not a promise here.\n\n"
        "```bash\nnever read  # inside a code block\n```\n"
    )
    assert unregistered("README.md", doc, entries) == ["A setting is always retried."]
    assert unregistered("docs/other.md", doc, entries) == ["A row is never lost.", "A setting is always retried."]


def test_proofs_are_checked_against_the_code() -> None:
    assert missing_proof("tests/test_guarantees.py::test_proofs_are_checked_against_the_code") is None
    assert missing_proof("tests/test_guarantees.py::test_proofs_are_checked_against_the_code[a-b]") is None
    assert "defines no test" in str(missing_proof("tests/test_guarantees.py::test_no_such_test"))
    assert "does not exist" in str(missing_proof("tests/no_such_file.py::test_x"))
    assert "FAULTS" in str(missing_proof("benchmarks/faults.py::no_such_fault"))
    assert missing_proof("benchmarks/faults.py::kill_9") is None
    assert "neither" in str(missing_proof("make test"))
