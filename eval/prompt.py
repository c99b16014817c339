"""Prompt layout: [stable system prefix][context][question], so the prefix is shared and cacheable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corpus.text import passage_heading

SYSTEM_PREFIX = (
    "You are a careful assistant that answers questions from a crib sheet of reference passages. "
    "Rules: answer with the shortest phrase that answers the question (a name, a number, a date or a "
    "place), without explanation. Use only facts stated in the passages, never outside knowledge. "
    "The passages may be shortened, with some words removed; read them charitably. If the passages do "
    "not contain the answer, reply exactly: I don't know. Passages are numbered [1], [2], and so on, "
    "most relevant first; each starts with the title of the article it comes from."
)


def context_block(titles: Sequence[str], texts: Sequence[str]) -> str:
    """Numbered passages, one per line block."""
    return "\n\n".join(
        f"{passage_heading(i, title)} {text}"
        for i, (title, text) in enumerate(zip(titles, texts, strict=True), start=1)
    )


class PromptLayout:
    """Renders prompts with the generator's chat template; the system prefix is identical for all."""

    def __init__(self, tokenizer: Any, system_prefix: str = SYSTEM_PREFIX, pinned: Sequence[str] = ()) -> None:
        self.tokenizer = tokenizer
        # Pinned reference documents belong to the stable prefix: identical in every prompt, so cached.
        self.system_prefix = system_prefix + (
            "\n\nReference documents (always available):\n" + "\n\n".join(pinned) if pinned else ""
        )

    def render(self, context: str, question: str, instruction: str = "") -> str:
        """[system prefix][context][question][instruction] through the chat template (an output format's
        instruction goes last, so the stable prefix is the same for every format).
        """
        tail = f"\n\n{instruction}" if instruction else ""
        messages = [
            {"role": "system", "content": self.system_prefix},
            {"role": "user", "content": f"Passages:\n{context}\n\nQuestion: {question}{tail}"},
        ]
        return str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))

    def stable_prefix(self) -> str:
        """The part of every prompt that is the same: everything before the context."""
        a = self.render("A", "Q")
        b = self.render("B", "R")
        n = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
        return a[:n]


def arrange(n: int, layout: str) -> list[int]:
    """Prompt order of n passages ranked best first: `ranked` keeps it; `edges` puts the best at both ends.

    edges for 5: [0, 2, 4, 3, 1] - the two most relevant open and close the context (lost in the middle).
    """
    if layout == "ranked":
        return list(range(n))
    return list(range(0, n, 2)) + list(reversed(range(1, n, 2)))
