"""The compact (document id, content hash) pairs of a sync's diff: right answers whatever the id keys do."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pytest

from corpus.errors import CribsheetError
from corpus.known_docs import KnownDocs


def _known(n: int) -> tuple[KnownDocs, dict[str, str]]:
    pairs = {f"doc-{i}": hashlib.sha256(f"{i}".encode()).hexdigest() for i in range(n)}
    pairs["ends-in-zero"] = "ab" * 31 + "00"  # a digest whose last byte is NUL survives
    return KnownDocs(pa.array(list(pairs)), pa.array(list(pairs.values()))), pairs


@pytest.mark.parametrize("collide", [False, True])
def test_held_hashes_new_ids_duplicates_and_gone(monkeypatch: pytest.MonkeyPatch, collide: bool) -> None:
    if collide:  # every id under one key: the id itself decides
        monkeypatch.setattr("corpus.known_docs._keys", lambda ids: np.full(len(ids), 7, dtype=np.uint64))
    known, pairs = _known(50)
    assert all(known.hash_of(d) == h for d, h in pairs.items()) and known.hash_of("doc-50") is None
    assert known.see("ends-in-zero") == pairs["ends-in-zero"]
    assert known.see("doc-3") == pairs["doc-3"] and known.see("new") is None
    for again in ("doc-3", "new"):
        with pytest.raises(CribsheetError, match=f"duplicate document id '{again}'"):
            known.see(again)
    assert known.n_seen == 3 and "doc-3" in known and "new" not in known
    assert known.gone() == sorted(set(pairs) - {"doc-3", "ends-in-zero"})


def test_an_empty_index_holds_nothing() -> None:
    known = KnownDocs()
    assert len(known) == 0 and known.see("a") is None and known.gone() == [] and known.n_seen == 1


@pytest.mark.parametrize("collide", [False, True])
def test_a_block_lookup_answers_as_one_by_one(monkeypatch: pytest.MonkeyPatch, collide: bool) -> None:
    if collide:
        monkeypatch.setattr(
            "corpus.known_docs._keys",
            lambda ids: np.array([str(i).endswith("7") for i in ids], dtype=np.uint64),
        )
    known, pairs = _known(30)
    ids = ["doc-7", "new-1", "ends-in-zero", "doc-17", "doc-29"]
    assert known.see_many(ids) == [pairs.get(i) for i in ids]
    assert known.see_many([]) == []
    for block in (["doc-7"], ["new-1"], ["x", "y", "x"]):
        with pytest.raises(CribsheetError, match="duplicate document id"):
            known.see_many(block)
    assert known.gone() == sorted(set(pairs) - set(ids))


def test_the_content_hash_of_a_plain_document_is_that_of_its_json() -> None:
    """The fast path (no metadata, no sections) hashes exactly the text json.dumps writes: stored hashes hold."""
    import json

    from corpus.models import Document

    for title, text in [("T", "plain"), ('Q"uote\\', "“curly” é 😀 \u2028 \x00 \t\n"), ("", "x")]:
        payload = json.dumps([title, text, {}], sort_keys=True, default=str)
        doc = Document(id="a", title=title, text=text)
        assert doc.content_hash() == hashlib.sha256(payload.encode()).hexdigest()


def test_keys_differ_for_ids_of_any_length_and_a_bad_hash_is_named() -> None:
    from corpus.known_docs import _keys

    ids = ["", "a", "b", "ab", "ba", "d" * 300, "é", "doc-1", "doc-10"]
    keys = _keys(ids)
    assert len(set(keys.tolist())) == len(ids) and _keys(pa.array(ids)).tolist() == keys.tolist()
    with pytest.raises(CribsheetError, match="not a 64-digit sha256"):
        KnownDocs(pa.array(["a"]), pa.array(["abc"]))
    with pytest.raises(CribsheetError, match="not hexadecimal"):
        KnownDocs(pa.array(["a"]), pa.array(["z" * 64]))
