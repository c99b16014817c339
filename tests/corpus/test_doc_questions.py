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


RST_LABELS = """\
Geographic functions
====================

.. function:: GeoHash(expression, precision=12)

    Availability: MySQL, PostGIS, SpatiaLite (LWGEOM/RTTOPO)

    Accepts a single geographic field or expression and returns a GeoHash representation of the geometry.

Database backends
-----------------

- MySQL connections now default to using the utf8mb4 character set, instead of utf8.
- Oracle now supports connection pools.

Spatial field options
---------------------

In addition to the regular options, spatial fields have the following additional options.

What's next?
------------

For full details on testing, see the testing guide in the topics section.

Sending multiple emails
-----------------------

Establishing and closing an SMTP connection is an expensive process. To send many emails at once, open one
connection and reuse it for every message.

Where should this code live in practice?
----------------------------------------

Signal handling and registration code can live anywhere you like, though a submodule of the app is usual.
"""


def test_labels_list_items_lead_ins_and_pointers_are_no_answers_and_a_deictic_faq_names_its_page(
    tmp_path: Path,
) -> None:
    """structure-3's rules, each written from a tuning case of Django's docs (not from the judged sample)."""
    (tmp_path / "geo.rst").write_text(RST_LABELS)
    docs = list(iter_documents(SourceConfig(path=tmp_path), SkipLog()))
    found = {q.question: q for q in structured_questions(docs) if q.generator == "structure-3"}
    # An availability label is skipped: the block after it answers what GeoHash() does.
    geohash = found["What does GeoHash() do, according to Geographic functions?"]
    assert geohash.answers[0].startswith("Accepts a single geographic field")
    # A section whose "lead" is one item of a list, a lead-in ending in a full stop, or a pointer: no question.
    assert not any("Database backends" in q or "Spatial field options" in q or "What's next" in q for q in found)
    # A section's first sentence is often its premise: the answer is its first two sentences.
    lead = found['What does the section "Sending multiple emails" of "Geographic functions" explain?']
    assert lead.answers == [
        "Establishing and closing an SMTP connection is an expensive process. To send many emails at once, open "
        "one connection and reuse it for every message."
    ]
    # An FAQ heading that points at its page carries the page's title.
    faq = found['Where should this code live in practice? (from "Geographic functions")']
    assert faq.kind == "faq" and faq.answers[0].startswith("Signal handling and registration code")
