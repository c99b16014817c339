"""Which passages a passage-dropping compressor kept: their titles must follow them into the prompt."""

from __future__ import annotations

from eval.compress.base import align_kept

PASSAGES = [
    "Paris is the capital of France and its largest city",
    "The Nile flows north through Egypt to the sea",
    "K2 is the second highest mountain on Earth",
    "Liverpool is a port city in England",
]


def test_dropped_passages_are_skipped_and_the_kept_ones_found_in_order() -> None:
    assert align_kept(PASSAGES, ["Nile flows north Egypt", "Liverpool port city England"]) == [1, 3]
    assert align_kept(PASSAGES, ["Paris capital France", "K2 second highest mountain"]) == [0, 2]
    assert align_kept(PASSAGES, ["highest mountain Earth"]) == [2]
    assert align_kept(PASSAGES, PASSAGES) == [0, 1, 2, 3]


def test_more_texts_than_passages_is_unknown_not_a_guess() -> None:
    assert align_kept(PASSAGES[:1], PASSAGES) is None
