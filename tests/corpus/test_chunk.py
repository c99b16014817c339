from corpus.chunk import ChunkerConfig, SentenceChunker, split_sentences
from corpus.models import Document

TEXT = (
    "Alpha is first. Beta comes second in line. Gamma is third! Delta follows? Epsilon ends the list of "
    "Greek letters here."
)


def test_split_sentences() -> None:
    assert split_sentences(TEXT)[:2] == ["Alpha is first.", "Beta comes second in line."]
    assert len(split_sentences(TEXT)) == 5


def test_chunks_respect_word_budget_and_sentence_boundaries() -> None:
    chunks = list(SentenceChunker(ChunkerConfig(max_words=8)).chunk([Document(id="d", title="T", text=TEXT)]))
    assert len(chunks) > 1
    assert all(len(c.text.split()) <= 8 or len(split_sentences(c.text)) == 1 for c in chunks)
    assert " ".join(c.text for c in chunks) == TEXT
    assert [c.position for c in chunks] == list(range(len(chunks)))


def test_chunk_ids_are_stable_and_content_derived() -> None:
    doc = Document(id="d", title="T", text=TEXT)
    first = [c.id for c in SentenceChunker(ChunkerConfig(max_words=8)).chunk([doc])]
    again = [c.id for c in SentenceChunker(ChunkerConfig(max_words=8)).chunk([doc])]
    assert first == again
    changed = Document(id="d", title="T", text=TEXT.replace("Alpha", "Omega"))
    assert [c.id for c in SentenceChunker(ChunkerConfig(max_words=8)).chunk([changed])][0] != first[0]
    assert len(set(first)) == len(first)
