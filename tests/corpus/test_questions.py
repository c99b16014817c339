"""The rule-based question generator: each rule, each filter, the bundled answerable label, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from corpus.bundled import build_questions
from corpus.errors import CribsheetError
from corpus.models import Document, Question
from corpus.questions import LLMQuestionConfig, generate_questions, llm_questions, take


def _doc(title: str, text: str) -> Document:
    return Document(id=title, title=title, text=text)


def _by_kind(docs: list[Document], **rules: int) -> dict[str, list[tuple[str, list[str]]]]:
    from corpus.questions import QuestionRules

    out: dict[str, list[tuple[str, list[str]]]] = {}
    for q in generate_questions(docs, QuestionRules(per_doc=10, **rules)):
        out.setdefault(q.kind, []).append((q.question, q.answers))
    return out


def test_each_rule_turns_a_sentence_into_a_question_with_its_answer() -> None:
    kinds = _by_kind(
        [
            _doc("Eiffel Tower", "The Eiffel Tower was designed by Gustave Eiffel and opened to visitors in 1889."),
            _doc("Bastille", "The Bastille was a fortress in Paris that was stormed on 14 July 1789 by a crowd."),
            _doc("Silk Road", "The Silk Road spanned over 6,400 km of land routes between China and Europe."),
        ]
    )
    assert ("The Eiffel Tower was designed by whom and opened to visitors in 1889?", ["Gustave Eiffel"]) in kinds[
        "agent"
    ]
    assert ("The Eiffel Tower was designed by Gustave Eiffel and opened to visitors in which year?", ["1889"]) in kinds[
        "year"
    ]
    assert kinds["date"] == [
        (
            "The Bastille was a fortress in Paris that was stormed on which date by a crowd?",
            ["14 July 1789", "July 14, 1789"],
        )
    ]
    assert (
        "The Silk Road spanned over how many km of land routes between China and Europe?",
        ["6,400", "6400"],
    ) in kinds["quantity"]
    cloze = dict(kinds["cloze"])
    assert cloze["Fill in the blank: The Silk Road spanned over 6,400 km of land routes between ___ and Europe"] == [
        "China"
    ]


def test_opening_pronoun_names_the_subject_and_ungrounded_sentences_are_dropped() -> None:
    kinds = _by_kind(
        [
            _doc("K2", "K2 is a mountain in the Karakoram range. It was first climbed in 1954 by an Italian team."),
            _doc("Nile", "The river is long. Egypt has depended on the water since 3000 BC and since 1902 on dams."),
        ]
    )
    assert ("K2 was first climbed in which year by an Italian team?", ["1954"]) in kinds["year"]
    assert not any("1902" in a for q in kinds.get("year", []) for a in q[1])  # "Nile" never named: ambiguous


def test_answers_that_are_ambiguous_given_away_or_in_the_title_are_dropped() -> None:
    kinds = _by_kind(
        [
            _doc("Rome", "Rome was founded in 753 BC and sacked in 1527. Rome was rebuilt after 1527 by popes."),
            _doc("Paris Commune", "The Paris Commune held Paris in 1871 for two months."),
        ]
    )
    years = [a for _, answers in kinds.get("year", []) for a in answers]
    assert "1527" not in years  # occurs twice in the document
    assert "753" not in years  # "753 BC" is not a year of the common era rule
    assert all("Paris" not in answers for _, answers in kinds.get("cloze", []))  # part of the title


def test_same_question_text_from_two_documents_is_dropped_and_order_is_deterministic() -> None:
    docs = [
        _doc("Alpha", "Alpha and Beta merged with Gamma Holdings in 1990 after a long dispute between the firms."),
        _doc("Beta", "Alpha and Beta merged with Gamma Holdings in 1990 after a long dispute between the firms."),
        _doc("Delta", "Delta moved its headquarters to Oslo in 1921 after the war ended in Europe."),
    ]
    first, again = generate_questions(docs), generate_questions(list(reversed(docs)))
    assert [q.id for q in first] == [q.id for q in again]
    assert {q.gold_doc_ids[0] for q in first} == {"Delta"}


def test_take_fails_in_one_line_when_the_corpus_cannot_supply_the_questions() -> None:
    with pytest.raises(CribsheetError, match="no question could be generated"):
        take([], 10, "empty.jsonl")
    qs = generate_questions([_doc("Delta", "Delta moved its headquarters to Oslo in 1921 after the war in Europe.")])
    with pytest.raises(CribsheetError, match=f"supports {len(qs)} questions; 50 were asked for"):
        take(qs, 50, "c.jsonl")
    assert take(qs, 1, "c.jsonl") == qs[:1]


def test_answerable_label_reads_whole_words_as_the_metrics_do() -> None:
    fanout = [
        {
            "decomposition": [
                {"id": "a", "question": "Largest continent?", "answer": "Asia", "evidence": {"title": "X"}},
                {"id": "b", "question": "Which is it?", "answer": "Asia", "evidence": {"title": "Y"}},
            ]
        }
    ]
    corpus = {"X": {"extract": "Asian elephants live here."}, "Y": {"extract": "It lies in Asia."}}
    labels = {q.id: q.answerable for q in build_questions(fanout, corpus)}
    assert labels == {"a": False, "b": True}


class _FakeLLM:
    def __init__(self, replies: list[str]) -> None:
        self.replies = iter(replies)
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def _create(self, **_: object) -> SimpleNamespace:
        content = next(self.replies)
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=content))])


def test_llm_questions_keep_only_replies_whose_answer_is_in_the_document() -> None:
    docs = [_doc(t, f"{t} was founded in {y} by settlers.") for t, y in (("Aa", 1801), ("Bb", 1802), ("Cc", 1803))]
    replies = [
        "not json at all",
        '{"question": "When was it founded?", "answer": "in 1999"}',  # not in the document
        'Sure: {"question": "Who founded the town?", "answer": "settlers"}',
    ]
    got = llm_questions(docs, LLMQuestionConfig(base_url="http://x", model="m"), 5, client=_FakeLLM(replies))
    assert [(q.question, q.answers) for q in got] == [("Who founded the town?", ["settlers"])]


def test_cli_writes_questions_or_fails_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    from tests.test_cli import run

    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        json.dumps({"id": "Delta", "title": "Delta", "text": "Delta moved its headquarters to Oslo in 1921."}) + "\n"
    )
    out = tmp_path / "q.jsonl"
    too_many = run("questions", "--corpus", str(corpus), "--out", str(out), "--n", "40", tmp=tmp_path)
    lines = [line for line in too_many.stderr.splitlines() if line.strip()]
    assert too_many.returncode == 2 and len(lines) == 1 and "were asked for" in lines[0], too_many.stderr
    assert not out.exists()
    empty = tmp_path / "e.jsonl"
    empty.write_text(json.dumps({"id": "a", "text": "hello world"}) + "\n")
    proc = run("questions", "--corpus", str(empty), "--out", str(out), tmp=tmp_path)
    assert proc.returncode == 2 and "no question could be generated" in proc.stderr and not out.exists()
    ok = run("questions", "--corpus", str(corpus), "--out", str(out), tmp=tmp_path)
    assert ok.returncode == 0, ok.stderr
    written = [Question.model_validate_json(line) for line in out.read_text().splitlines()]
    assert written and all(q.gold_doc_ids == ["Delta"] and q.answerable for q in written)


def test_cli_reads_sphinx_sources_written_as_txt_with_extension(tmp_path: Path) -> None:
    """Django's docs are reStructuredText in .txt files: without `--extension .txt=rst` they are plain text
    and their structure (here FAQ headings) gives no question."""
    from tests.test_cli import run

    tree = tmp_path / "docs"
    tree.mkdir()
    (tree / "faq.txt").write_text(
        "FAQ\n===\n\nHow do I cite the framework in a paper?\n---------------------------------------\n\n"
        "Cite the framework by its name and the version you used, with the project's web address.\n\n"
        "Is the framework a content management system?\n---------------------------------------------\n\n"
        "No. It is a programming toolkit that lets you build websites quickly and safely.\n"
    )
    out = tmp_path / "q.jsonl"
    plain = run("questions", "--corpus", str(tree), "--out", str(out), tmp=tmp_path)
    assert plain.returncode == 2 and "no question could be generated" in plain.stderr
    rst = run("questions", "--corpus", str(tree), "--out", str(out), "--extension", ".txt=rst", tmp=tmp_path)
    assert rst.returncode == 0, rst.stderr
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((q["kind"], q["question"]) for q in written) == [
        ("faq", "How do I cite the framework in a paper?"),
        ("faq", "Is the framework a content management system?"),
    ]
    bad = run("questions", "--corpus", str(tree), "--out", str(out), "--extension", "txt", tmp=tmp_path)
    assert bad.returncode == 2 and "expected SUFFIX=EXTRACTOR" in bad.stderr
