"""Pruning at the reranker's price: sentence vectors stored at index time, read back at query time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from corpus.chunk import SentenceChunker
from corpus.errors import CribsheetError
from corpus.index import IndexOptions, sync_index
from corpus.sentences import SentenceVectors, chunk_sentences
from eval.compress import COMPRESSORS, CompressorDeps, ExtractiveCompressor
from tests.fakes import CountingEmbedder, HashEmbedder, count_words
from tests.helpers import load_documents


def _index(tmp_path: Path, corpus: Path, sentences: bool) -> Path:
    path = tmp_path / ("with.lancedb" if sentences else "without.lancedb")
    sync_index(
        load_documents(corpus), SentenceChunker(), HashEmbedder(), path, IndexOptions(sentence_vectors=sentences)
    )
    return path


def test_pruned_selects_like_extractive_without_embedding_a_stored_sentence(tmp_path: Path, tiny_corpus: Path) -> None:
    index = _index(tmp_path, tiny_corpus, sentences=True)
    docs = load_documents(tiny_corpus)
    passages = [d.text for d in docs]
    stored = SentenceVectors(index)
    units = chunk_sentences(passages)
    assert stored.available and len(stored.lookup_with_cost(units)[0]) == len(units)
    emb = CountingEmbedder()
    deps = CompressorDeps(count_tokens=count_words, embedder=emb, index_path=index)
    pruned = COMPRESSORS.build(COMPRESSORS.spec("pruned"), deps)
    question = "Which river flows into the Mediterranean Sea?"
    got = pruned.compress(passages, question, 3.0)
    want = ExtractiveCompressor(count_words, HashEmbedder()).compress(passages, question, 3.0)
    assert (got.texts, got.kept) == (want.texts, want.kept) and got.tokens_out < got.tokens_in
    assert emb.documents_embedded == 0 and pruned.missed == 0  # type: ignore[attr-defined]
    pruned.compress([*passages, "A sentence the index never saw."], question, 3.0)
    assert emb.documents_embedded == 1 and pruned.missed == 1  # type: ignore[attr-defined]


def test_the_agnostic_twin_ignores_the_question(tmp_path: Path, tiny_corpus: Path) -> None:
    index = _index(tmp_path, tiny_corpus, sentences=True)
    passages = [d.text for d in load_documents(tiny_corpus)]
    deps = CompressorDeps(count_tokens=count_words, embedder=HashEmbedder(), index_path=index)
    twin = COMPRESSORS.build(COMPRESSORS.spec("pruned-agnostic"), deps)
    a = twin.compress(passages, "Which river flows into the sea?", 3.0)
    b = twin.compress(passages, "How high is K2?", 3.0)
    assert a.texts == b.texts and not twin.query_aware
    aware = COMPRESSORS.build(COMPRESSORS.spec("pruned"), deps)
    assert aware.query_aware and aware.compress(passages, "How high is K2?", 3.0).texts != a.texts


def test_pruned_needs_an_index_with_sentence_vectors(tmp_path: Path, tiny_corpus: Path) -> None:
    index = _index(tmp_path, tiny_corpus, sentences=False)
    deps = CompressorDeps(count_tokens=count_words, embedder=HashEmbedder(), index_path=index)
    with pytest.raises(CribsheetError, match="--sentence-vectors"):
        COMPRESSORS.build(COMPRESSORS.spec("pruned"), deps)


class _SameVector(HashEmbedder):
    """Every text gets one vector: similarity ties everywhere, so only the other terms decide."""

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.ones((len(texts), 4), dtype=np.float32) / 2

    def embed_query(self, text: str) -> np.ndarray:
        return np.ones(4, dtype=np.float32) / 2


def test_the_rerankers_order_and_the_questions_words_weigh_in() -> None:
    from eval.compress.extractive import ExtractiveConfig

    passages = ["The city hosts many museums and a famous opera.", "Its river is the Danube, long and wide."]
    question = "Which river is the Danube?"  # the budget (ratio 2) holds one of the two sentences
    words = ExtractiveCompressor(count_words, _SameVector()).compress(passages, question, 2.0)
    assert words.kept == [1]  # the question's words outweigh one place in the reranker's order
    order = ExtractiveConfig(word_overlap=0.0)
    assert ExtractiveCompressor(count_words, _SameVector(), order).compress(passages, question, 2.0).kept == [0]
    assert ExtractiveCompressor(count_words, _SameVector(), order).compress(passages[::-1], question, 2.0).kept == [0]
    # The agnostic twin never reads the question's words.
    assert ExtractiveConfig().word_overlap > 0 and not _twin_reads_words(passages, question)


def _twin_reads_words(passages: list[str], question: str) -> bool:
    from eval.compress.pruned import PrunedCompressor

    twin = PrunedCompressor(count_words, _SameVector(), _NoStore(), query_aware=False)  # type: ignore[arg-type]
    return twin.compress(passages, question, 2.0).kept == [1]


class _NoStore:
    """An index without the sentences asked for: every vector is embedded at query time."""

    def lookup_with_cost(self, sentences: list[str]) -> tuple[dict, dict]:
        return {}, {}

    def units(self, passages: list[str]) -> list:
        from corpus.sentences import unit_spans

        return [unit_spans(p) for p in passages]


class SlowEmbedder(HashEmbedder):
    """Each batch costs 20 ms and each document vector 5 ms more: what the index stores as each sentence
    vector's bill is real time, never nothing."""

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        import time

        time.sleep(0.02 + 0.005 * len(texts))
        return super().embed_documents(texts)


class _Clock:
    """The compressor's clock in a test: it moves only by what the fakes say a step costs, so every bill and
    every seconds figure is known exactly, whatever the machine's load."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


READ_S = 1.0
"""What reading a passage's units costs on the fake clock: paid by the request, never on the cold bill."""
QUERY_S = 0.25
"""What embedding the question costs on the fake clock: the scoring, timed again in every cold bill."""


class TickingEmbedder(HashEmbedder):
    """SlowEmbedder's costs on the fake clock: a batch costs 20 ms plus 5 ms a document, so a bill that
    depended on how vectors were batched (which follows the order of asking) would show."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__()
        self.clock = clock

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.clock.now += 0.02 + 0.005 * len(texts)
        return super().embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        self.clock.now += QUERY_S
        return super().embed_query(text)


@pytest.mark.parametrize("name", ["extractive", "pruned"])
def test_the_cold_bill_is_the_same_whichever_setting_question_or_run_asks_first(
    name: str, tmp_path: Path, tiny_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sentence vectors are shared across settings and questions; each sample's cold cost still counts every
    vector it uses (embedded here or at index time) at the seconds they first cost, so it depends neither on
    the order of the grid nor on the run (extractive keeps each passage's bill in the index's cache). The
    only part timed again is the scoring: the read of the passages' units is paid, never on the cold bill."""
    import eval.compress.extractive as extractive
    from corpus.sentences import unit_spans
    from eval.compress.cache import LanceCompressionCache

    index = tmp_path / "idx.lancedb"
    sync_index(
        load_documents(tiny_corpus), SentenceChunker(), SlowEmbedder(), index, IndexOptions(sentence_vectors=True)
    )
    passages = [d.text for d in load_documents(tiny_corpus)]
    questions = ["Which river flows into the Mediterranean Sea?", "How high is K2?"]
    clock = _Clock()
    monkeypatch.setattr(extractive, "time", clock)
    stored = SentenceVectors(index)

    def batch(passage: str) -> float:
        """What embedding one passage's sentences as one batch costs on the fake clock."""
        return 0.02 + 0.005 * len(unit_spans(passage))

    def vector_bill(k: int) -> float:
        """What the first `k` passages' sentence vectors cost when they were first computed."""
        if name == "extractive":
            return sum(batch(p) for p in passages[:k])
        texts = [
            p[u[0] : u[1]] for p, units in zip(passages[:k], stored.units(passages[:k]), strict=True) for u in units
        ]
        found, costs = stored.lookup_with_cost(texts)
        assert set(found) == set(texts) and all(c > 0 for c in costs.values())  # every vector has its bill
        return sum(costs.values())

    def sweep(order: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[float, float]]:
        """A fresh sweep process: nothing in memory, the index's cache as the earlier runs left it."""
        deps = CompressorDeps(
            count_tokens=count_words,
            embedder=TickingEmbedder(clock),
            index_path=index,
            cache=LanceCompressionCache(index),
        )
        comp = COMPRESSORS.build(COMPRESSORS.spec(name), deps)
        split = comp.split  # type: ignore[attr-defined]

        def read(texts: Sequence[str]) -> object:
            clock.now += READ_S
            return split(texts)

        comp.split = read  # type: ignore[attr-defined]
        out = {}
        for k, q in order:
            r = comp.compress(passages[:k], questions[q], 2.0)
            assert r.cold_seconds is not None
            out[k, q] = (r.seconds, r.cold_seconds)
        comp.flush()
        assert getattr(comp, "missed", 0) == 0
        return out

    small_first = sweep([(2, 0), (5, 0), (2, 1), (5, 1)])
    large_first = sweep([(5, 1), (2, 1), (5, 0), (2, 0)])  # a second run, in the other order
    for key, (_, cold) in small_first.items():
        assert cold == pytest.approx(vector_bill(key[0]) + QUERY_S)  # every vector's bill and the scoring ...
        assert cold == pytest.approx(large_first[key][1])  # ... whatever ran before
    if name == "extractive":  # paid: what this request spent; the second user of a passage pays nothing for it
        assert small_first[2, 0][0] == pytest.approx(READ_S + QUERY_S + vector_bill(2))
        assert small_first[5, 0][0] == pytest.approx(READ_S + QUERY_S + sum(batch(p) for p in passages[2:5]))
        assert small_first[2, 1][0] == pytest.approx(large_first[2, 1][0]) == pytest.approx(READ_S + QUERY_S)
    else:  # pruned embeds nothing at query time: the request pays the read and the scoring
        paid = [seconds for seconds, _ in [*small_first.values(), *large_first.values()]]
        assert paid == pytest.approx([READ_S + QUERY_S] * len(paid))


def _auto(
    share: float = 0.8, temperature: float = 0.05, antecedents: bool = True, question_words: bool = True
) -> object:
    """pruned-auto's selection alone (no index, no embedder): the scores are given."""
    from eval.compress.pruned_auto import AutoPrunedCompressor

    comp = object.__new__(AutoPrunedCompressor)
    comp.share, comp.temperature, comp.keep_antecedents = share, temperature, antecedents
    comp.whole_passages = 0  # the selection alone: no passage kept whole
    comp.keep_question_words = question_words
    return comp


def test_pruned_auto_compresses_an_easy_question_to_its_ceiling_and_keeps_a_spread_answer() -> None:
    import numpy as np

    sentences = [(0, f"Sentence {i} about the river.") for i in range(10)]
    sizes = [10] * 10
    peaked = np.array([0.9, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3])
    easy = _auto().select(peaked, sizes, 100, 8.0, sentences)  # type: ignore[attr-defined]
    assert easy == {0, 1}  # one sentence holds the mass; the 8x ceiling's floor (13 tokens) adds the next best
    spread = np.array([0.80, 0.79, 0.78, 0.77, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3])
    kept = _auto().select(spread, sizes, 100, 8.0, sentences)  # type: ignore[attr-defined]
    assert kept == {0, 1, 2}  # close scores share the mass: 80 % of it needs three, far below the ceiling
    assert _auto(share=0.95).select(spread, sizes, 100, 8.0, sentences) == {0, 1, 2, 3}  # type: ignore[attr-defined]
    fixed = ExtractiveCompressor.select(_auto(), spread, sizes, 100, 4.0, sentences)  # type: ignore[arg-type]
    assert fixed == {0, 1}  # the fixed 4x budget (25 tokens) cuts the spread answer


def test_pruned_auto_keeps_the_sentence_a_pronoun_points_back_to() -> None:
    import numpy as np

    sentences = [(0, "The Rhine rises in the Alps."), (0, "It flows into the North Sea."), (1, "It is long.")]
    sims = np.array([0.1, 0.9, 0.1])

    def kept(comp: object) -> set[int]:
        chosen = comp.select(sims, [6, 6, 3], 15, 8.0, sentences)  # type: ignore[attr-defined]
        return comp.complete(chosen, sims, sentences, set(), [])  # type: ignore[attr-defined, no-any-return]

    assert kept(_auto()) == {0, 1}
    assert kept(_auto(antecedents=False)) == {1}


def test_pruned_auto_keeps_every_question_word_the_context_has() -> None:
    from corpus.text import content_words

    passages = [
        "Run migrations with the migrate command. It applies them in order.",
        "The sqlmigrate command prints the SQL of a migration without running it.",
        "Squashing reduces many migrations to a few.",
    ]
    question = "How do I see the SQL sqlmigrate prints for a migration?"
    sentences = [
        (0, "Run migrations with the migrate command."),
        (0, "It applies them in order."),
        (1, passages[1]),
        (2, passages[2]),
    ]
    sims = np.array([0.9, 0.2, 0.3, 0.1])  # the embedder's favourite is not the sentence with the command
    asked, words = set(content_words(question)), [set(content_words(t)) for _, t in sentences]
    bare = _auto(question_words=False)
    chosen = bare.select(sims, [7, 5, 13, 8], 33, 8.0, sentences)  # type: ignore[attr-defined]
    assert chosen == {0}
    assert bare.complete(chosen, sims, sentences, asked, words) == {0}  # type: ignore[attr-defined]
    # "sql" and "sqlmigrate" are in the context only in sentence 2: it comes back; "print" is there too.
    assert _auto().complete(chosen, sims, sentences, asked, words) == {0, 2}  # type: ignore[attr-defined]
    # A query-agnostic selection has no question words: nothing is added.
    assert _auto().complete(chosen, sims, sentences, set(), words) == {0}  # type: ignore[attr-defined]


def test_pruned_auto_is_its_own_setting_and_its_share_is_in_the_hash(tmp_path: Path) -> None:
    from eval.settings import CompressionSpec, CompressorConfig, GridConfig, SweepConfig
    from flows.options import parse_compression

    assert parse_compression("pruned:auto:8") == {"compressor": "pruned-auto", "target_ratio": 8.0}
    assert parse_compression("pruned:auto") == {"compressor": "pruned-auto", "target_ratio": 8.0}
    assert parse_compression("pruned-auto") == {"compressor": "pruned-auto", "target_ratio": 8.0}  # README's form
    grid = GridConfig(compressions=[CompressionSpec(compressor="pruned-auto", target_ratio=8.0)])
    base = SweepConfig(index_path=tmp_path, questions_path=tmp_path, store_path=tmp_path / "r", grid=grid)
    other = base.model_copy(update={"compressor": CompressorConfig(relevance_share=0.6)})
    setting = grid.expand()[0]
    assert setting.name.startswith("pruned-auto-8x-k")
    assert base.setting_hash(setting) != other.setting_hash(setting)
    pruned = GridConfig(compressions=[CompressionSpec(compressor="pruned", target_ratio=4.0)]).expand()[0]
    assert base.setting_hash(pruned) == other.setting_hash(pruned)  # pruned's own knobs did not change


def test_pruned_auto_keeps_a_list_items_lead_in_and_a_question_headings_answer() -> None:
    from corpus.text import sentence_spans
    from corpus.units import structure_units

    passage = (
        "Implementing addons involves several components and APIs:\n\n"
        "- V8: the C++ library Node.js uses. V8 provides objects.\n\n"
        "- libuv: The C library that implements the event loop.\n\n"
        "How do I build an addon?\n\n"
        "Run node-gyp configure in the addon folder. Then run node-gyp build."
    )
    first = [(0, "Another passage first.", True, "text")]
    spans = first + [(1, passage[a:b], last, "text") for a, b, last in sentence_spans(passage)]
    assert structure_units(spans) == {2: [1], 3: [1], 4: [1], 7: [6]}
    # A list after a passage boundary has no lead-in: structure never crosses passages.
    assert structure_units([(0, "Options:", True, "text"), (1, "- verbose: print more.", True, "list")]) == {}

    from eval.compress.pruned_auto import AutoPrunedCompressor, AutoPrunedConfig

    def auto(structure: bool) -> AutoPrunedCompressor:
        config = AutoPrunedConfig(relevance_share=0.5, temperature=0.05, keep_structure=structure, whole_passages=0)
        return AutoPrunedCompressor(count_words, HashEmbedder(), _NoStore(), config)  # type: ignore[arg-type]

    question = "What is the C library that implements the event loop in libuv?"
    with_units = auto(True).compress([passage], question, 8.0)
    alone = auto(False).compress([passage], question, 8.0)
    assert "libuv: The C library" in with_units.texts[0] and "libuv: The C library" in alone.texts[0]
    assert "several components and APIs:" in with_units.texts[0]  # the list item kept its lead-in ...
    assert "several components and APIs:" not in alone.texts[0]  # ... which the selection alone dropped


def test_structure_units_from_an_outline_code_lead_ins_table_headers_and_section_leads() -> None:
    from corpus.units import structure_units

    spans = [
        (0, "fs.readFile(path, callback)", True, "heading"),
        (0, "Reads the entire contents of a file.", False, "text"),
        (0, "The callback gets two arguments.", True, "text"),
        (0, "For example:", True, "text"),
        (0, "fs.readFile('/etc/passwd', cb);", True, "code"),
        (0, "option | default", False, "row"),
        (0, "encoding | null", True, "row"),
    ]
    links = structure_units(spans)
    assert links == {4: [3], 6: [5]}  # code -> its lead-in; a row -> its table's header
    # With section leads, the heading and everything under it bring the section's first sentence.
    assert structure_units(spans, section_lead=True) == {0: [1], 2: [1], 3: [1], 4: [3, 1], 5: [1], 6: [5, 1]}


def test_a_code_line_or_table_row_ending_in_a_question_mark_is_no_question_heading() -> None:
    from corpus.units import structure_units

    after = [(0, "The driver fills in the value.", True, "text"), (0, "It quotes strings.", True, "text")]
    code = [(0, "cursor.execute('SELECT * FROM t WHERE a = ?')", True, "code"), *after]
    row = [(0, "placeholder | ?", True, "row"), *after]
    assert structure_units(code) == {} and structure_units(row) == {}
    question = [(0, "Can I use placeholders?", True, "text"), *after]
    assert structure_units(question) == {2: [1]}  # a real question heading still brings its answer along


def test_a_section_lead_is_the_first_prose_sentence_past_an_api_entrys_parameter_list() -> None:
    from corpus.units import section_lead_of, structure_units

    # An API entry (Node.js style): signature, parameter list, then the sentence that says what it does.
    spans = [
        (0, "urlSearchParams.append(name, value)", True, "signature"),
        (0, "- name {string}", True, "list"),
        (0, "- value {string}", True, "list"),
        (0, "Append a new name-value pair to the query string.", True, "text"),
        (0, "Event: 'close'", True, "heading"),
        (0, "- Returns: {undefined}", True, "list"),
        (1, "Emitted when the stream closes.", True, "text"),
    ]
    assert section_lead_of(spans, 0) == 3  # past the parameter list
    assert section_lead_of(spans, 4) is None  # the section has no prose in this passage
    links = structure_units(spans, section_lead=True)
    assert links[0] == [3] and links[1] == [3] and links[2] == [3]  # the signature and its parameters
    assert 4 not in links and 5 not in links  # nothing to bring: no prose before the passage ends
    assert structure_units(spans) == {}  # without section leads, no links from headings


def test_whole_passages_keeps_the_rerankers_first_passages_unpruned() -> None:
    from eval.compress.pruned_auto import AutoPrunedCompressor, AutoPrunedConfig

    first = "Django is a web framework. It was released in 2005. Its admin is generated from models."
    others = [f"Passage {n} talks about routing. Views return responses. Templates render pages." for n in range(3)]
    passages = [first, *others]
    question = "How do views and templates render pages?"

    def kept(whole: int, ratio: float, share: float = 0.95) -> list[str]:
        config = AutoPrunedConfig(whole_passages=whole, relevance_share=share)
        auto = AutoPrunedCompressor(count_words, HashEmbedder(), _NoStore(), config)  # type: ignore[arg-type]
        return auto.compress(passages, question, ratio).texts

    assert first not in kept(0, 8.0, share=0.3)
    assert kept(1, 8.0, share=0.3)[0] == first
    assert len(kept(1, 8.0)) > 1  # the rest of the relevance mass still comes from the others' best units
    assert AutoPrunedConfig().whole_passages == 2
