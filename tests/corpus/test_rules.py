"""The index's code version (`IndexSpec.rules`) covers the code that cuts and embeds, wherever it lives, and
nothing else: an edit to it rebuilds the index (an incremental sync would mix vectors made by two versions),
an edit beside it (a stop word, a docstring, a query-time rule) rebuilds nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from corpus.rules import rule_sources, rules_version

CORPUS = Path(__file__).resolve().parents[2] / "corpus"


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the `corpus` package's sources, to edit (the folder holding it)."""
    shutil.copytree(CORPUS, tmp_path / "corpus", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def edit(root: Path, module: str, old: str, new: str) -> None:
    path = root / "corpus" / module
    text = path.read_text()
    assert text.count(old) == 1, f"{module}: {old!r} is not there once"
    path.write_text(text.replace(old, new))


# An edit that changes no vector: the stop list the metrics read, docstrings, comments, query-time rules.
UNSHAPING = [
    ("text.py", '"do does did has have had not no so', '"do does did has have had not no so also'),
    ("text.py", "NEGATIONS = frozenset(", "NEGATIONS = frozenset('ever '.split()) | frozenset("),
    ("text.py", '"""Does some needle occur in', '"""Is some needle in'),
    ("chunk.py", '"""Sentence- and paragraph-aligned chunks', '"""Paragraph- and sentence-aligned chunks'),
    ("chunk.py", "# A sentence longer than a chunk", "# A sentence too long for a chunk"),
    ("models.py", '"""The title, and the section path when there is one."""', '"""Title and section."""'),
    ("units.py", "len(first.split()) <= 15", "len(first.split()) <= 16"),  # read at query time, from stored units
    ("sentences.py", "limit(everything)", "limit(everything + 1)"),  # the query-time reader
]
# An edit that changes vectors, in each place the index's chunks and vectors are shaped.
SHAPING = [
    ("text.py", "Dr|Mr|Mrs|Ms|St", "Dr|Mr|Mrs|Ms|St|Gen"),  # the sentence splitter's abbreviations
    ("chunk.py", ">= cfg.paragraph_fill * cfg.max_tokens", "> cfg.paragraph_fill * cfg.max_tokens"),
    ("table.py", 'f"{heading}\\n{chunk.text}"', 'f"{heading}: {chunk.text}"'),  # indexed_text
    ("models.py", 'f"{self.title} › {self.section}" if self.section and self.title else (self.section or '
     "self.title)\n\n    @staticmethod", 'f"{self.title} / {self.section}" if self.section and self.title '
     "else (self.section or self.title)\n\n    @staticmethod"),  # Chunk.heading, not Hit.heading
    ("embed.py", "vector = hidden[row][inside].mean(0)", "vector = hidden[row][inside].sum(0)"),  # span pooling
    ("index_batch.py", "texts = [indexed_text(c) for c, _, _ in chunks]", "texts = [c.text for c, _, _ in chunks]"),
    ("sentences.py", "out.append((s + lead, s + len(body.rstrip()), True, \"code\"))",
     "out.append((s, s + len(body), True, \"code\"))"),  # unit_spans: a code block's unit
]  # fmt: skip


def test_the_copy_has_the_version_of_the_package(copy: Path) -> None:
    assert rules_version(copy) == rules_version()


@pytest.mark.parametrize(("module", "old", "new"), UNSHAPING, ids=[f"{m}:{o[:24]}" for m, o, _ in UNSHAPING])
def test_an_edit_that_shapes_no_vector_keeps_the_rules_version(copy: Path, module: str, old: str, new: str) -> None:
    before = rules_version(copy)
    edit(copy, module, old, new)
    assert rules_version(copy) == before


@pytest.mark.parametrize(("module", "old", "new"), SHAPING, ids=[f"{m}:{o[:24]}" for m, o, _ in SHAPING])
def test_an_edit_to_the_code_that_cuts_or_embeds_changes_the_rules_version(
    copy: Path, module: str, old: str, new: str
) -> None:
    before = rules_version(copy)
    edit(copy, module, old, new)
    assert rules_version(copy) != before


def test_a_helper_a_rule_starts_calling_is_followed(copy: Path) -> None:
    """The closure follows names: a new helper (here in another module) is covered without being listed."""
    (copy / "corpus" / "helper.py").write_text("def squash(text):\n    return text.lower()\n")
    edit(
        copy,
        "table.py",
        "from corpus.models import Chunk\n",
        "from corpus.models import Chunk\nfrom corpus.helper import squash\n",
    )
    edit(copy, "table.py", "else chunk.text\n", "else squash(chunk.text)\n")
    sources = rule_sources(copy)
    assert "corpus.helper:squash" in sources
    before = rules_version(copy)
    (copy / "corpus" / "helper.py").write_text("def squash(text):\n    return text.upper()\n")
    assert rules_version(copy) != before


def test_a_rule_moved_to_another_module_and_re_exported_is_followed_to_its_definition(copy: Path) -> None:
    """Moving the splitter out of text.py (re-exported there for its importers) keeps it covered."""
    text = (copy / "corpus" / "text.py").read_text()
    start, end = text.index("_SENTENCE_END = "), text.index("# --- negation and pronouns")
    (copy / "corpus" / "spans.py").write_text("from __future__ import annotations\n\nimport re\n\n" + text[start:end])
    (copy / "corpus" / "text.py").write_text(
        text[:start] + "from corpus.spans import sentence_spans as sentence_spans\n\n" + text[end:]
    )
    sources = rule_sources(copy)
    assert "corpus.spans:sentence_spans" in sources and "corpus.spans:_ABBREVIATION" in sources
    before = rules_version(copy)
    edit(copy, "spans.py", "Dr|Mr|Mrs|Ms|St", "Dr|Mr|Mrs|Ms|St|Gen")
    assert rules_version(copy) != before
