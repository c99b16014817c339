from pathlib import Path

import pytest

from corpus.errors import InputFileError
from corpus.load import read_jsonl
from corpus.models import Question
from tests.helpers import load_documents


def test_loads_valid_corpus(tiny_corpus: Path) -> None:
    docs = load_documents(tiny_corpus)
    assert [d.id for d in docs] == ["K2", "Asia", "Liverpool", "Paris", "Nile"]
    assert docs[0].title == "K2"


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=r"nope\.jsonl: corpus not found"):
        load_documents(tmp_path / "nope.jsonl")


@pytest.mark.parametrize(
    ("content", "pattern"),
    [
        ('{"id": "a", "text": "x"}\n{"id": "b", "text": \n', r"bad\.jsonl:2: invalid JSON"),
        ('{"id": "a", "text": "x"}\n\n{"id": "b"}\n', r"bad\.jsonl:3: field 'text'"),
        ('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', r"bad\.jsonl:2: duplicate document id 'a'"),
        ('["not", "an", "object"]\n', r"bad\.jsonl:1: expected a JSON object"),
        ("\n\n", r"bad\.jsonl: no documents"),
    ],
)
def test_malformed_corpus_names_file_and_line(tmp_path: Path, content: str, pattern: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(InputFileError, match=pattern):
        load_documents(path)


def test_non_utf8_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"id": "a", "text": "ok"}\n{"id": "b", "text": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(InputFileError, match=r"latin1\.jsonl:2: not valid UTF-8"):
        load_documents(path)


def test_question_needs_answers(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"id": "q", "question": "why?", "answers": []}\n')
    with pytest.raises(InputFileError, match=r"q\.jsonl:1: field 'answers'"):
        list(read_jsonl(path, Question))
