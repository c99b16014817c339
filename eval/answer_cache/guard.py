"""The semantic answer cache's guard: do two close questions ask the same thing?

A close embedding is not enough: "How tall is Mount Everest?" and "How old is Mount Everest?" embed almost
alike. A hit must also pass two guards:
1. `same_specifics`: both name the same numbers and names;
2. `same_ask`: their answer types meet, a name plays the same role, and every content word only one of them
   has stands for a word only the other has (by word-embedding cosine, `WORD_MATCH`).
Both are built for precision: a false hit serves a wrong answer, a miss only costs a recomputation.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from corpus.text import BLANK_PREFIX, NEGATIONS, STOP, stem

_LETTERS = r"[^\W\d_]"
_SPECIFIC = re.compile(rf"\d[\d,.]*\d\w*|\d\w*|\b{_LETTERS}[\w'’-]*")
_POSSESSIVE = re.compile(r"['’]s?$")

_FUNCTION_WORDS = frozenset(
    "What Who Whom Whose When Where Which Why How The A An In On At Of For From By To With Is Was Are Were "
    "Did Does Do Has Have Had It Its This That These Those There According".split()
)
_ANSWER_TYPE = {
    **dict.fromkeys("when year years date century decade".split(), "time"),
    **dict.fromkeys("where city town village country nation place location".split(), "place"),
    **dict.fromkeys(
        "who whom whose person artist author writer poet painter composer architect scientist inventor "
        "astronaut explorer entrepreneur".split(),
        "person",
    ),
    **dict.fromkeys("many number".split(), "count"),
}
"""Words that say what kind of thing the answer is ("where" and "in which city" both ask for a place)."""
_WH = frozenset("when where who whom whose many".split())
"""Answer-type words that are only that (an "author" or a "city" is a content word as well)."""
_DIMENSION = {
    "tall": "height", "high": "height", "deep": "depth", "long": "length", "wide": "width", "old": "age",
    "heavy": "weight", "fast": "speed", "far": "distance", "big": "size", "large": "size", "hot": "temperature",
}  # fmt: skip
""""How tall" asks for the height: the adjective after "how" stands for its noun."""
_KEEP = frozenset("before after during into over about than from since until under above below against".split())
"""Function words that change what is asked ("before" vs "after"): content words here."""
_FRAME = frozenset(
    "name tell know please can could would exactly located situated "
    "become became come came take took happen happened occur occurred".split()
)
"""Words that frame a question without changing what it asks ("Can you tell me ...", light verbs: "When
did X happen?", "When did X come to an end?")."""
WORD_MATCH = 0.8
"""Cosine between two words' embeddings at which one may stand for the other ("largest" / "biggest"):
chosen on hand-written tuning pairs (benchmarks/answer_cache.py)."""


def _text(question: str) -> str:
    return BLANK_PREFIX.sub("", question.strip()).replace("n't", " not").replace("n’t", " not")


def _specific(token: str) -> str | None:
    """A number (digit-group commas dropped) or a capitalised name, in the form two questions compare; None
    for any other token (a question or function word, a lower-case word).
    """
    w = _POSSESSIVE.sub("", token.rstrip(".,"))
    if not w or not (w[0].isdigit() or w[0].isupper()) or w in _FUNCTION_WORDS or w.lower() in _FRAME:
        return None
    return re.sub(r"(?<=\d),(?=\d)", "", w)


def specifics(question: str) -> frozenset[str]:
    """The numbers and capitalised names of a question, question and function words aside: what makes it
    about this entity rather than a neighbour's.
    """
    return frozenset(w for m in _SPECIFIC.finditer(_text(question)) if (w := _specific(m.group(0))))


def same_specifics(a: str, b: str) -> bool:
    """The first guard: both questions name the same numbers and names ("... in 1889 ... how many metres" vs
    "... in which year ... 330 metres" is a near miss). A name may lose its capital in the other question
    ("Radium was discovered by whom?" / "Who discovered radium?").
    """
    names_a, names_b = specifics(a), specifics(b)
    words_a, words_b = (set(re.findall(r"[\w'’-]+", _text(q).lower())) for q in (a, b))
    return all(n.lower() in words_b for n in names_a - names_b) and all(n.lower() in words_a for n in names_b - names_a)


def asked(question: str) -> tuple[frozenset[str], dict[str, str]]:
    """What a question asks for, in lower-case words: the answer types its wh-phrase names ("where", "in
    which city"; a cloze's blank: "person" after "written by", else "*", any), and its content words (stem -> word),
    names among them (the first guard has compared the names; a name both share cancels out).
    """
    text = _text(question)
    words = re.findall(rf"{_LETTERS}{{2,}}", text)
    lowered = [w.lower() for w in words]
    types = {
        _ANSWER_TYPE[w] if w in _WH else _ANSWER_TYPE[lowered[i + 1]]
        for i, w in enumerate(lowered)
        if (w in _WH and (words[i].islower() or words[i] in _FUNCTION_WORDS))
        or (w in ("which", "what") and i + 1 < len(lowered) and lowered[i + 1] in _ANSWER_TYPE)
    }
    if "___" in text:
        types.add("person" if re.search(r"\w(?:ed|en|wn)\s+by\s+___\W*$", text) else "*")  # "written by ___"
    lowered = [_DIMENSION.get(w, w) if i and lowered[i - 1] == "how" else w for i, w in enumerate(lowered)]
    content = {stem(w): w for w in lowered if (w not in STOP or w in _KEEP) and w not in _FRAME and w not in _WH}
    if any(w in NEGATIONS for w in lowered):
        content["not"] = "not"
    return frozenset(types), content


_AUX = re.compile(r"\b(?:did|does|do)\b", re.IGNORECASE)
_COPULA = re.compile(r"\b(?:is|was|are|were)\b|['’]s\b", re.IGNORECASE)
_PASSIVE_AFTER = re.compile(r"\s+(?:was|were|is|are|has been|have been)\s+(?:\w+ly\s+)?\w+(?:ed|en|wn)\b", re.I)
_NAME_REST = re.compile(r"^(?:\s+(?:(?:of|the|and|de|la|von|van|du|da)\s+)*[A-Z][\w'’.-]*)+")
_WH_START = re.compile(r"\s*(?:who|whom|what|which)\b", re.IGNORECASE)


def name_role(question: str) -> str | None:
    """Whether a question's first name is the subject of its verb ("Whom did Victoria succeed?", "Victoria
    succeeded whom?", "Who was succeeded by Victoria?") or its object ("Who succeeded Victoria?", "Victoria
    was succeeded by whom?"); None when it cannot tell (a copula: "Who was Victoria's husband?").
    """
    text = _text(question)
    name = next((m for m in _SPECIFIC.finditer(text) if _specific(m.group(0))), None)
    if name is None:
        return None
    before, after = text[: name.start()], text[name.end() :]
    after = _NAME_REST.sub("", after)  # the rest of a name of several words ("Years of Solitude")
    if _PASSIVE_AFTER.match(after):
        return "object"
    if re.search(r"\bby\s+(?:the\s+)?$", before, re.IGNORECASE) or _AUX.search(before):
        return "subject"
    if not before.strip(" \t\"'‘“") or before.strip().lower() == "the":
        return "subject"  # the question opens with the name: "Victoria succeeded whom?"
    if _COPULA.search(before) or not _WH_START.match(text):
        return None
    return "object"


def same_ask(a: str, b: str, word_similarity: Callable[[str, str], float], word_match: float = WORD_MATCH) -> bool:
    """The second guard: both questions ask for the same thing.
    - Their answer types, where both name one, meet ("where" vs "when" is a near miss).
    - A name plays the same role ("Who succeeded X?" vs "Whom did X succeed?").
    - Every content word only one of them has stands for one only the other has (`word_similarity` >=
      `word_match`: "biggest" for "largest", not "smallest" for "largest" nor "old" for "tall"), or is an
      answer-type noun the other asks for with a bare wh-word ("Which *author* wrote X?" / "Who wrote X?").
      A word with no counterpart ("Who *served* as ...") is a miss.
    """
    types_a, words_a = asked(a)
    types_b, words_b = asked(b)
    if types_a and types_b and not types_a & types_b and "*" not in types_a | types_b:
        return False
    if {name_role(a), name_role(b)} == {"subject", "object"}:
        return False
    only_a = [w for s, w in words_a.items() if s not in words_b]
    only_b = [w for s, w in words_b.items() if s not in words_a]
    for mine, theirs, their_types in ((only_a, only_b, types_b), (only_b, only_a, types_a)):
        bare = not any(w in _ANSWER_TYPE for w in theirs)  # the other names no answer-type noun of its own
        for word in mine:
            if word in _ANSWER_TYPE and bare and {"*", _ANSWER_TYPE[word]} & their_types:
                continue
            if not theirs or max(word_similarity(word, other) for other in theirs) < word_match:
                return False
    return True


def question_guard(
    word_vector: Callable[[str], np.ndarray], word_match: float = WORD_MATCH
) -> Callable[[str, str], bool]:
    """Both guards, with words compared by the cosine of their (unit) vectors from `word_vector`."""

    def similarity(x: str, y: str) -> float:
        return float(word_vector(x) @ word_vector(y))

    return lambda a, b: same_specifics(a, b) and same_ask(a, b, similarity, word_match)
