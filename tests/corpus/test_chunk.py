from corpus.chunk import ChunkerConfig, SentenceChunker, sentence_spans
from corpus.models import Document

TEXT = (
    "Alpha is first. Beta comes second in line. Gamma is third!\n\n"
    "Delta follows? Epsilon ends the list of Greek letters here. Zeta."
)


def test_sentence_spans_are_exact_offsets() -> None:
    spans = sentence_spans(TEXT)
    assert [TEXT[s:e] for s, e, _ in spans][:2] == ["Alpha is first.", "Beta comes second in line."]
    assert [end for _, _, end in spans] == [False, False, True, False, False, True]
    short = "Dr. Who? Yes. 3 cats."
    assert [short[s:e] for s, e, _ in sentence_spans(short)] == ["Dr. Who?", "Yes.", "3 cats."]


def test_chunks_fit_the_token_budget_and_keep_spans() -> None:
    doc = Document(id="d", title="T", text=TEXT)
    chunks = list(SentenceChunker(ChunkerConfig(max_tokens=8)).chunk([doc]))
    assert len(chunks) == 4
    assert all(len(c.text.split()) <= 8 for c in chunks)
    assert all(doc.text[c.char_start : c.char_end] == c.text for c in chunks)
    assert [c.position for c in chunks] == list(range(len(chunks)))


def test_paragraph_boundary_preferred_when_chunk_is_full_enough() -> None:
    doc = Document(id="d", text=TEXT)
    chunks = list(SentenceChunker(ChunkerConfig(max_tokens=16, paragraph_fill=0.5)).chunk([doc]))
    assert [c.text for c in chunks] == [TEXT.split("\n\n")[0], TEXT.split("\n\n")[1]]
    glued = list(SentenceChunker(ChunkerConfig(max_tokens=16, paragraph_fill=1.0)).chunk([doc]))
    assert "Gamma is third!\n\nDelta follows?" in glued[0].text


def test_overlap_repeats_trailing_sentences() -> None:
    doc = Document(id="d", text="One two. Three four. Five six. Seven eight. Nine ten.")
    chunks = list(SentenceChunker(ChunkerConfig(max_tokens=6, overlap_tokens=2)).chunk([doc]))
    assert [c.text for c in chunks] == ["One two. Three four. Five six.", "Five six. Seven eight. Nine ten."]


def test_overlong_sentence_is_cut_at_words() -> None:
    doc = Document(id="d", text=" ".join(f"w{i}" for i in range(40)) + ".")
    chunks = list(SentenceChunker(ChunkerConfig(max_tokens=16)).chunk([doc]))
    assert [len(c.text.split()) for c in chunks] == [16, 16, 8]


def test_token_counter_is_the_embedders() -> None:
    double = SentenceChunker(ChunkerConfig(max_tokens=8), count_tokens=lambda ts: [2 * len(t.split()) for t in ts])
    chunks = list(double.chunk([Document(id="d", text=TEXT)]))
    assert max(len(c.text.split()) for c in chunks) == 4


def test_chunk_ids_are_stable_and_content_derived() -> None:
    doc = Document(id="d", title="T", text=TEXT)
    chunker = SentenceChunker(ChunkerConfig(max_tokens=8))
    first = [c.id for c in chunker.chunk([doc])]
    assert first == [c.id for c in SentenceChunker(ChunkerConfig(max_tokens=8)).chunk([doc])]
    changed = Document(id="d", title="T", text=TEXT.replace("Zeta", "Eta"))
    again = [c.id for c in chunker.chunk([changed])]
    assert again[:-1] == first[:-1] and again[-1] != first[-1]
    assert len(set(first)) == len(first)
