"""Questions from documentation structure: FAQ headings, glossary terms, API definitions, section leads,
read from real extractor output (reStructuredText and Markdown parsed here)."""

from __future__ import annotations

from pathlib import Path

from corpus.doc_questions import structured_questions
from corpus.models import Document
from corpus.questions import generate_questions
from corpus.sources import SkipLog, SourceConfig, iter_documents

RST = """\
Frequently asked
================

How do I cite the framework in a paper?
---------------------------------------

Cite the framework by its name and the version you used, with the project's web address.

Is the framework a content management system?
---------------------------------------------

No. It is a programming toolkit that lets you build websites quickly and safely.

Glossary
--------

.. glossary::

    view
        A function responsible for rendering a page from a request.

    field
        An attribute on a model that maps to one database column.

Reference
---------

.. function:: get_object_or_404(klass, *args, **kwargs)

    Calls get() on a given model manager, but raises Http404 instead of the model's DoesNotExist exception.

Caching strategies
------------------

Caching saves the result of expensive calculations so that you do not have to perform them again later.
"""

MD = """\
# File system

## Class: `FileHandle`

A FileHandle object wraps a numeric file descriptor for the promise based interface.

### Event: `'close'`

The 'close' event is emitted when the FileHandle has been closed and can no longer be used.

### `filehandle.chmod(mode)`

* `mode` {integer} the file mode bit mask.

Modifies the permissions on the file, like the chmod system call does.

### `filehandle.stat()`

Returns:
"""


def _docs(tmp_path: Path) -> dict[str, Document]:
    (tmp_path / "faq.rst").write_text(RST)
    (tmp_path / "fs.md").write_text(MD)
    return {d.id: d for d in iter_documents(SourceConfig(path=tmp_path), SkipLog())}


def test_each_structure_gives_its_question_and_the_sentence_that_answers_it(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    found = {(q.kind, q.question): q for q in structured_questions(docs.values())}
    faq = found["faq", "How do I cite the framework in a paper?"]
    assert faq.answers == ["Cite the framework by its name and the version you used, with the project's web address."]
    assert faq.gold_doc_ids == ["faq.rst"] and faq.section.endswith("How do I cite the framework in a paper?")
    # A one-word first sentence ("No.") brings the next one, so the reference has content to recall.
    short = found["faq", "Is the framework a content management system?"]
    assert short.answers == ["No. It is a programming toolkit that lets you build websites quickly and safely."]
    assert found["definition", 'What does "view" mean in "Frequently asked"?'].answers == [
        "A function responsible for rendering a page from a request."
    ]
    api = found["api", "What does get_object_or_404() do, according to Frequently asked?"]
    assert api.answers[0].startswith("Calls get() on a given model manager")
    assert found["section", 'What does the section "Caching strategies" of "Frequently asked" explain?']
    md = {q.question: q for q in structured_questions([docs["fs.md"]])}
    assert md["What is FileHandle?"].answers[0].startswith("A FileHandle object wraps")
    assert "When is the 'close' event of FileHandle emitted?" in md
    # The parameter list is skipped: the description answers "what does it do".
    chmod = md["What does filehandle.chmod() do, according to File system?"]
    assert chmod.answers == ["Modifies the permissions on the file, like the chmod system call does."]
    # An entry whose text is only a lead-in to a list or code asks nothing.
    assert not any("stat()" in q for q in md)


def test_questions_that_quote_their_answer_or_repeat_across_documents_are_dropped(tmp_path: Path) -> None:
    quoting = Document(
        id="a",
        title="A",
        text="Caching the results\n\nCaching the results of queries.",
        outline=[(0, 19, "heading"), (21, 52, "text")],
    )
    assert structured_questions([quoting]) == []  # the reference adds no content word to the question
    same = "Setup guide\n\nInstall the package with pip and then run the migrate command once."
    outline = [(0, 11, "heading"), (13, len(same), "text")]
    twins = [Document(id=i, title="Guide", text=same, outline=outline) for i in ("x", "y")]
    assert structured_questions(twins) == []  # the same question from two documents is ambiguous


def test_a_blank_never_cuts_a_word_and_a_heading_is_never_glued_to_a_sentence() -> None:
    glued = "bz2 --- Support for bzip2 compression\n\nThe bz2 module was written by Gustav Nieminen in Helsinki."
    doc = Document(
        id="bz2",
        title="bz2",
        text=glued,
        outline=[(0, 37, "heading"), (39, len(glued), "text")],
    )
    questions = [q.question for q in generate_questions([doc])]
    assert questions and not any("Support for" in q for q in questions)
    cut = Document(id="ssl", title="ssl", text="The ssl module wraps OpenSSL's library for the Python runtime.")
    assert not any("___SSL" in q.question for q in generate_questions([cut]))
