"""Levers 4 and 5: the semantic answer cache and cited structured answers, with fakes and case tables."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

from eval.answer_cache.lookup import cache_hits
from eval.run.citations import citation_part, parse_cited
from eval.run.sweep import run_sweep
from eval.settings import CompressionSpec, GridConfig, Setting
from tests.conftest import TINY_QUESTIONS, write_jsonl
from tests.helpers import SweepSetup

PARSE_CASES = [
    ('{"answer": "Asia", "citations": [2]}', ("Asia", [2])),
    ('{"answer": "Asia", "citations": []}', ("Asia", [])),
    ('{"answer": "Asia"}', (None, None)),  # citations missing
    ('{"answer": "Asia", "citations": [0]}', (None, None)),  # passages are numbered from 1
    ('{"answer": "Asia", "citations": ["2"]}', (None, None)),
    ('{"answer": "Asia", "citations": [true]}', (None, None)),
    ('{"answer": 3, "citations": [1]}', (None, None)),
    ('{"answer": "Asia", "citations": [1], "note": "x"}', (None, None)),
    ("Asia [2]", (None, None)),
    ("", (None, None)),
]


@pytest.mark.parametrize(("text", "expected"), PARSE_CASES)
def test_cited_answers_parse_only_when_they_follow_the_schema(text: str, expected: tuple[object, object]) -> None:
    assert parse_cited(text) == expected


def test_citation_precision_and_recall_against_the_gold_documents() -> None:
    docs = ["Asia", "K2", "Asia", "Nile"]  # passage 1..4 in prompt order
    answer, part = citation_part('{"answer": "Asia", "citations": [1, 2]}', docs, ["Asia"])
    assert answer == "Asia" and part.schema_valid and part.citations == "[1, 2]"
    assert part.citation_precision == 0.5 and part.citation_recall == 1.0
    _, none = citation_part('{"answer": "x", "citations": [4]}', docs, ["Asia"])
    assert none.citation_precision == 0.0 and none.citation_recall == 0.0
    _, absent = citation_part('{"answer": "x", "citations": [1]}', docs, ["Paris"])  # gold not in the context
    assert absent.citation_recall is None and absent.citation_precision == 0.0
    _, out_of_range = citation_part('{"answer": "x", "citations": [9]}', docs, ["Asia"])
    assert out_of_range.schema_valid is False  # a citation of a passage the prompt did not have
    _, repeated = citation_part('{"answer": "Asia", "citations": [1, 1]}', docs, ["Asia"])
    assert repeated.schema_valid is True and repeated.citation_precision == 1.0
    raw, bad = citation_part("Asia", docs, ["Asia"])
    assert raw == "Asia" and bad.schema_valid is False and bad.citation_precision is None
    # A compressor that merged the passages without saying which: two numbered texts of unknown source.
    merged: list[str | None] = [None, None]
    _, untraced = citation_part('{"answer": "Asia", "citations": [2]}', merged, ["Asia"])
    assert untraced.schema_valid is True  # passage 2 is in the prompt
    assert untraced.citation_precision is None and untraced.citation_recall is None  # not "wrong": unknown


def test_the_cited_schema_holds_citations_to_the_prompts_passages_and_bounds_the_answer() -> None:
    import jsonschema

    from eval.run.citations import CITED_SCHEMA, cited_schema

    four = cited_schema(4)
    jsonschema.validate({"answer": "Asia", "citations": [1, 4]}, four)
    for bad in (
        {"answer": "Asia", "citations": [5]},  # the prompt has 4 passages
        {"answer": "Asia", "citations": [0]},
        {"answer": "x" * 81, "citations": [1]},  # bounded, so the object closes within the token allowance
        {"answer": "Asia"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, four)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"answer": "Asia", "citations": list(range(1, 10))}, cited_schema(20))  # 8 at most
    assert cited_schema(None) == CITED_SCHEMA  # passage count unknown: only the shape is held
    jsonschema.validate({"answer": "Asia", "citations": [7]}, cited_schema(None))
    jsonschema.validate({"answer": "I don't know", "citations": []}, cited_schema(0))
    with pytest.raises(jsonschema.ValidationError):  # a prompt without passages: nothing to cite
        jsonschema.validate({"answer": "Asia", "citations": [1]}, cited_schema(0))


def test_the_answer_cache_serves_a_question_close_to_an_answered_one_never_from_a_hit() -> None:
    e = np.eye(3)
    vectors = [e[0], e[1], 0.99 * e[0] + 0.141 * e[2], e[0], e[2]]
    vectors = [v / np.linalg.norm(v) for v in vectors]
    lookups = cache_hits(["a", "b", "c", "d", "e"], lambda i: vectors[i], threshold=0.95)
    hits = lookups.hits
    assert set(lookups.lookup_s) == {"a", "b", "c", "d", "e"}  # every question pays a lookup
    assert {k: v.source for k, v in hits.items()} == {"c": "a", "d": "a"}
    assert hits["d"].similarity == pytest.approx(1.0) and hits["c"].lookup_s >= 0
    assert cache_hits(["a", "b", "c", "d", "e"], lambda i: vectors[i], threshold=1.01).hits == {}


def test_bad_lever_values_are_refused_by_the_config() -> None:
    with pytest.raises(ValueError, match="less than or equal to 1"):
        Setting(top_k=3, answer_cache=1.5)
    with pytest.raises(ValueError, match="'text' or 'cited-json'"):
        GridConfig(outputs=["xml"])  # type: ignore[list-item]


def test_new_levers_at_their_default_keep_every_earlier_setting_hash() -> None:
    plain = Setting(top_k=8, compressor="llmlingua", target_ratio=4.0)
    earlier = {k: v for k, v in plain.model_dump(mode="json").items() if k not in ("output", "answer_cache")}
    raw = json.dumps(earlier, sort_keys=True, separators=(",", ":")).encode()
    assert plain.config_hash() == hashlib.sha256(raw).hexdigest()[:16]  # what the hash was before the levers
    cited = plain.model_copy(update={"output": "cited-json"})
    cached = plain.model_copy(update={"answer_cache": 0.9})
    assert len({plain.config_hash(), cited.config_hash(), cached.config_hash()}) == 3
    assert (cited.name, cached.name) == ("llmlingua-4x-k8-hybrid-dense-cited", "llmlingua-4x-k8-hybrid-dense-cache0.9")


def test_a_sweep_with_cited_answers_and_an_answer_cache_marks_and_scores_them(
    setup: SweepSetup, tmp_path: Path
) -> None:
    config, components = setup
    twin = {**TINY_QUESTIONS[1], "id": "q2-again"}  # the same question again: a cache hit of q2
    questions = write_jsonl(tmp_path / "q.jsonl", [*TINY_QUESTIONS, twin])
    grid = GridConfig(
        compressions=[CompressionSpec()], top_ks=[3], outputs=["text", "cited-json"], answer_caches=[None, 0.99]
    )
    config = config.model_copy(update={"questions_path": questions, "grid": grid})
    comps = components()
    run_sweep(config, comps)
    held = [s for s in comps.generator.schemas if s is not None]
    assert len(held) == 2 and all(isinstance(s, list) for s in held)  # one schema per prompt, per cited setting
    # each prompt's citations are held to its own 3 passages (top-3), so none can point past them
    assert {json.dumps(s["properties"]["citations"]["items"]) for batch in held for s in batch} == {
        json.dumps({"type": "integer", "minimum": 1, "maximum": 3})
    }
    con = duckdb.connect(str(config.store_path), read_only=True)
    rows = con.execute(
        "SELECT setting_name, question_id, answer, answer_contains, schema_valid, citations, citation_precision, "
        "cache_hit_of, prompt_tokens, retrieve_seconds, e2e_cold_s, status FROM samples"
    ).fetchall()
    by = {(r[0], r[1]): r for r in rows}
    assert len(rows) == 20 and all(r[-1] == "ok" for r in rows)
    cited = by["none-k3-hybrid-dense-cited", "q2"]
    assert "Asia" in cited[2] and not cited[2].startswith("{")  # the JSON's answer, not the JSON
    assert cited[4] is True and json.loads(cited[5]) == [1] and cited[6] == 1.0
    assert by["none-k3-hybrid-dense", "q2"][4] is None  # text answers have no schema to follow
    hit = by["none-k3-hybrid-dense-cache0.99", "q2-again"]
    source = by["none-k3-hybrid-dense-cache0.99", "q2"]
    assert hit[7] == "q2" and hit[2] == source[2] and hit[3] == 1.0  # the reused answer, scored on its own gold
    assert hit[8] == 0 and hit[9] is None and hit[10] is not None and hit[10] < 0.5  # no prompt, no retrieval
    assert source[7] is None
    assert sum(r[7] is not None for r in rows) == 2  # one hit per cached setting, nothing else
    (n,) = con.execute("SELECT count(*) FROM settings WHERE output = 'cited-json'").fetchone() or (0,)
    assert n == 2


GUARD_CASES = [
    ("Who wrote Hamlet?", "Hamlet was written by whom?", True),
    ("In which year was the Eiffel Tower completed?", "Fill in the blank: The Eiffel Tower was completed in ___", True),
    ("Big Ben was completed in which year?", "Eiffel Tower was completed in which year?", False),  # another entity
    (
        "It is 330 metres tall and was finished in which year?",
        "It is how many metres tall and was finished in 1889?",
        False,
    ),
    ("What is the capital of France?", "What is the capital of Spain?", False),
    ("How tall is Mount Everest?", "How old is Mount Everest?", True),  # a lower-case attribute: the 2nd guard's
    ("Who discovered radium?", "Radium was discovered by whom?", True),  # a name may lose its capital
    ("What is Canada's capital?", "What is the capital of Canada?", True),  # a possessive is the same name
    ("Who founded Москва?", "Who founded Київ?", False),  # names in any script
    ("What is the population of Łódź?", "What is the population of Ås?", False),
    ("Who won the World Cup in the 1990s?", "Who won the World Cup in 1990?", False),  # a decade is not a year
    ("How many people lived there in 1,000 BC?", "How many people lived there in 1000 BC?", True),
]


@pytest.mark.parametrize(("a", "b", "same"), GUARD_CASES)
def test_the_cache_guard_compares_the_numbers_and_names_of_two_questions(a: str, b: str, same: bool) -> None:
    from eval.answer_cache.guard import same_specifics

    assert same_specifics(a, b) is same


SYNONYMS = {frozenset(p) for p in (("largest", "biggest"), ("wrote", "written"))}


def _word_similarity(x: str, y: str) -> float:
    """1 for the same word or a listed synonym, 0.7 for any other pair (close, as antonyms embed)."""
    return 1.0 if x == y or frozenset((x, y)) in SYNONYMS else 0.7


ASK_CASES = [
    ("Who wrote Hamlet?", "Hamlet was written by whom?", True),  # passive, a synonym
    ("What is the largest ocean?", "Which ocean is the biggest?", True),
    ("When did the Titanic sink?", "In what year did the Titanic sink?", True),  # "when" = "in what year"
    ("Where was Mozart born?", "In which city was Mozart born?", True),
    ("Can you tell me where Mozart was born?", "Where was Mozart born?", True),  # framing words
    ("What is the largest ocean?", "What is the smallest ocean?", False),  # close words, not synonyms
    ("How tall is Mount Everest?", "How old is Mount Everest?", False),
    ("When did Mozart die?", "Where did Mozart die?", False),  # another answer type
    ("Who succeeded Queen Victoria?", "Whom did Queen Victoria succeed?", False),  # roles swapped
    ("Who taught Aristotle?", "Who did Aristotle teach?", False),
    ("Who won the race?", "Who did not win the race?", False),  # negation
    ("Who was the first President?", "Who served as the first President?", False),  # a word with no counterpart
    ("Who wrote One Hundred Years of Solitude?", "One Hundred Years of Solitude was written by whom?", True),
    ("What is the largest country in Africa?", "What is the largest city in Africa?", False),  # type nouns
    ("In which city was Mozart born?", "In which country was Mozart born?", False),
    ("Which author wrote Hamlet?", "Who wrote Hamlet?", True),  # a type noun the other asks with "who"
    ("Who ruled England before Henry VIII?", "Who ruled England after Henry VIII?", False),
    ("Which river flows into the Danube?", "Which river flows out of the Danube?", False),
    ("Who was the fourth president?", "Who was the fourteenth president?", False),  # a shared prefix
    ("Who was the grandfather of Queen Victoria?", "Who was the grandmother of Queen Victoria?", False),
    ("When was the bridge completed?", "When was the bridge complete?", True),  # an inflection
    ("Who succeeded Queen Victoria?", "Who was succeeded by Queen Victoria?", False),  # the name as agent
    ("Who succeeded Queen Victoria?", "Queen Victoria succeeded whom?", False),  # the name opens it
    ("When was Hamlet written?", "Hamlet was written by ___", False),  # "by ___" asks for a person
    ("Who won the race?", "Who didn't win the race?", False),
]


@pytest.mark.parametrize(("a", "b", "same"), ASK_CASES)
def test_the_second_guard_sees_a_changed_lower_case_word_type_or_role(a: str, b: str, same: bool) -> None:
    from eval.answer_cache.guard import same_ask

    assert same_ask(a, b, _word_similarity, word_match=0.8) is same
    assert same_ask(b, a, _word_similarity, word_match=0.8) is same  # symmetric


def test_the_guard_keeps_a_close_question_about_another_entity_out_of_the_cache() -> None:
    vectors = [np.array([1.0, 0.0]), np.array([1.0, 0.0])]
    texts = ["What is the capital of France?", "What is the capital of Spain?"]
    assert cache_hits(["a", "b"], lambda i: vectors[i], 0.9).hits["b"].source == "a"  # cosine alone: a false hit
    assert cache_hits(["a", "b"], lambda i: vectors[i], 0.9, texts).hits == {}


def test_the_whole_guard_compares_words_by_their_vectors() -> None:
    from eval.answer_cache.guard import question_guard

    basis = {"tall": [1.0, 0.0], "old": [0.6, 0.8], "largest": [0.0, 1.0], "biggest": [0.0, 1.0]}

    def word_vector(word: str) -> np.ndarray:
        return np.array(basis.get(word, [0.0, 0.0]))

    guard = question_guard(word_vector)
    assert guard("What is the largest ocean?", "Which ocean is the biggest?")
    assert not guard("How tall is Mount Everest?", "How old is Mount Everest?")  # cosine 0.6 < WORD_MATCH
    assert not guard("What is the largest ocean?", "What is the largest lake on Mars?")  # a name added
    vectors = [np.array([1.0, 0.0]), np.array([1.0, 0.0])]
    texts = ["How tall is Mount Everest?", "How old is Mount Everest?"]
    assert cache_hits(["a", "b"], lambda i: vectors[i], 0.9, texts, guard).hits == {}


def test_a_prompt_too_long_for_the_engine_fails_alone_not_the_batch(setup: SweepSetup) -> None:
    from tests.fakes import ExtractingGenerator

    config, components = setup
    generator = ExtractingGenerator()
    comps = components(generator=generator)
    result = run_sweep(
        config.model_copy(update={"grid": GridConfig(compressions=[CompressionSpec()], top_ks=[3])}), comps
    )
    con = duckdb.connect(result.store_path)
    lengths = [r[0] for r in con.execute("SELECT prompt_tokens FROM samples ORDER BY prompt_tokens").fetchall()]
    con.close()
    generator.max_prompt_tokens = lengths[1]  # type: ignore[attr-defined]  # the longer prompts no longer fit
    config2 = config.model_copy(
        update={
            "store_path": config.store_path.with_name("long.duckdb"),
            "grid": GridConfig(compressions=[CompressionSpec()], top_ks=[3]),
            "max_failed_fraction": 1.0,  # the long prompts fail; the run goes on to show the others did not
        }
    )
    run_sweep(config2, comps, reuse=False)
    con = duckdb.connect(str(config2.store_path))
    rows = con.execute("SELECT status, error FROM samples ORDER BY prompt_tokens NULLS LAST").fetchall()
    failed = [e for s, e in rows if s == "failed"]
    assert 0 < len(failed) < len(rows) and all("exceeds max_model_len" in e for e in failed)


def test_an_answer_the_engine_cut_is_marked_and_its_fragment_not_checked(setup: SweepSetup) -> None:
    from eval.engine.generator import Generation
    from tests.fakes import ExtractingGenerator

    class Cutting(ExtractingGenerator):
        """Every answer stops at the token limit after an unfinished 'It was founded in 13'."""

        def generate(self, prompts: Sequence[str], json_schema: Any = None) -> list[Generation]:
            outs = super().generate(prompts, json_schema)
            return [o.model_copy(update={"text": f"{o.text}. It was founded in 13", "cut": True}) for o in outs]

    config, components = setup
    result = run_sweep(
        config.model_copy(update={"grid": GridConfig(compressions=[CompressionSpec()], top_ks=[3])}),
        components(generator=Cutting()),
    )
    con = duckdb.connect(result.store_path)
    cut = {r[0] for r in con.execute("SELECT answer_cut FROM samples WHERE status = 'ok'").fetchall()}
    fragments = con.execute("SELECT count(*) FROM claims WHERE claim LIKE '%founded in 13%'").fetchall()[0][0]
    con.close()
    assert cut == {True} and fragments == 0


def test_a_miss_does_not_pay_the_question_embedding_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retrieval embeds a missed question anyway: its lookup bill is the search alone; a hit pays its embedding."""
    import types

    import eval.answer_cache.lookup as lookup

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(lookup, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))
    vectors = {0: np.array([1.0, 0.0], dtype=np.float32), 1: np.array([1.0, 0.0], dtype=np.float32)}
    embedded: list[int] = []

    def embed(i: int) -> np.ndarray:
        embedded.append(i)
        clock.now += 5.0  # the only time that passes: an embedding
        return vectors[i]

    lookups = cache_hits(["first", "again"], embed, 0.9)
    assert "again" in lookups.hits and "first" not in lookups.hits and embedded == [0, 1]
    assert lookups.lookup_s == {"first": 0.0, "again": 5.0}
    assert lookups.hits["again"].lookup_s == 5.0
