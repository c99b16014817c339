"""The one text toolkit: normalisation, canonical and content words, stemming (Snowball), sentence spans,
negation, pronouns, demonyms, capitalised names and the passage headings of a prompt's context. Dataset
labels, metrics, the faithfulness checker, the answer-cache guard and the compressors all read text through
it, so they read it the same way.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

import snowballstemmer

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans(dict.fromkeys(string.punctuation + "‘’“”–—", " "))

STOP = frozenset(
    "a an the of in on at to for by with from and or but is are was were be been being it its this that these those "
    "as which who whom whose what when where why how i you he she they we his her their our your my me him them us "
    "do does did has have had not no so than then there here also about into over after before during".split()
)
"""Function words: what is left of a text without them is its content."""


@lru_cache(maxsize=16_384)
def normalize(text: str) -> str:
    """SQuAD-style normalisation: fold accents and case, drop punctuation and articles, squeeze spaces.
    Cached: the faithfulness checker reads the same context sentences once per claim.
    """
    if not text.isascii():  # ASCII has no accent to fold (and NFKD leaves it as it is)
        text = unicodedata.normalize("NFKD", text)
        text = "".join(c for c in text if not unicodedata.combining(c))
    text = text.lower()
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)  # 8,611 == 8611; 1990,1991 stays two numbers
    text = re.sub(r"\b([a-z])\.(?=[a-z]\b)", r"\1", text)  # u.s. == us (SQuAD drops punctuation)
    text = re.sub(r"(?<=\d)\.(?=\d)", "point", text)  # 3.14 stays one token, so it never contains "3"
    text = text.translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def content_tokens(text: str) -> list[str]:
    """The normalised words of `text` that are not function words (all of them when every word is one)."""
    words = normalize(text).split()
    content = [w for w in words if w not in STOP]
    return content or words


def contains(haystack: str, needles: Sequence[str]) -> bool:
    """Does some needle occur in `haystack` as whole normalised words ("Asia" is not in "Asian")?"""
    hay = f" {normalize(haystack)} "
    return any(f" {n} " in hay for n in (normalize(x) for x in needles) if n)


def occurrences(haystack: str, needle: str) -> int:
    """How often `needle` occurs in `haystack` as whole normalised words."""
    n = normalize(needle)
    return f" {normalize(haystack)} ".count(f" {n} ") if n else 0


DEMONYMS = {
    "american": "united states",
    "british": "britain",
    "english": "england",
    "french": "france",
    "german": "germany",
    "italian": "italy",
    "spanish": "spain",
    "portuguese": "portugal",
    "dutch": "netherlands",
    "polish": "poland",
    "russian": "russia",
    "swedish": "sweden",
    "norwegian": "norway",
    "danish": "denmark",
    "greek": "greece",
    "turkish": "turkey",
    "chinese": "china",
    "japanese": "japan",
    "korean": "korea",
    "indian": "india",
    "egyptian": "egypt",
    "mexican": "mexico",
    "brazilian": "brazil",
    "canadian": "canada",
    "australian": "australia",
    "austrian": "austria",
    "swiss": "switzerland",
    "belgian": "belgium",
    "irish": "ireland",
    "scottish": "scotland",
    "persian": "persia",
    "iranian": "iran",
    "roman": "rome",
    "hungarian": "hungary",
    "czech": "czech republic",
    "finnish": "finland",
    "argentine": "argentina",
    "nigerian": "nigeria",
    "israeli": "israel",
    "ukrainian": "ukraine",
    "welsh": "wales",
    "icelandic": "iceland",
    "thai": "thailand",
    "vietnamese": "vietnam",
    "filipino": "philippines",
    "indonesian": "indonesia",
    "pakistani": "pakistan",
    "afghan": "afghanistan",
    "iraqi": "iraq",
    "syrian": "syria",
    "saudi": "saudi arabia",
    "ethiopian": "ethiopia",
    "kenyan": "kenya",
    "moroccan": "morocco",
    "algerian": "algeria",
    "peruvian": "peru",
    "chilean": "chile",
    "colombian": "colombia",
    "cuban": "cuba",
    "serbian": "serbia",
    "croatian": "croatia",
    "romanian": "romania",
    "bulgarian": "bulgaria",
    "mongolian": "mongolia",
    "tibetan": "tibet",
    "armenian": "armenia",
    "georgian": "georgia",
    "lebanese": "lebanon",
    "bengali": "bengal",
    "nepali": "nepal",
    "burmese": "burma",
    "scandinavian": "scandinavia",
    "african": "africa",
    "asian": "asia",
    "european": "europe",
}
"""Demonym -> place: "a Norwegian playwright" and "a playwright from Norway" say the same (one token each:
the place's last word stands for it)."""
_PLACE = {d: place.split()[-1] for d, place in DEMONYMS.items()}


def canonical(tokens: list[str]) -> list[str]:
    """Normalised tokens with each demonym replaced by its place ("polish" -> "poland")."""
    return [_PLACE.get(t, t) for t in tokens]


def canonical_words(text: str) -> list[str]:
    """The normalised words of `text`, each demonym as its place."""
    return canonical(normalize(text).split())


def content_words(text: str) -> list[str]:
    """Normalised words without function words, demonyms as their place."""
    return canonical([w for w in normalize(text).split() if w not in STOP])


# --- stemming ---------------------------------------------------------------------------------------------

_STEMMER = snowballstemmer.stemmer("english")
_BRITISH = ((re.compile(r"is(e|ed|es|ing|ation)$"), r"iz\1"), (re.compile(r"tre(s?)$"), r"ter\1"))


@lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """The Snowball (Porter2) stem of a lower-case word, British spellings first folded to American
    ("organised" and "organized" -> "organ"; "kilometres" -> "kilomet"; "plays", "played" -> "play").
    """
    for pattern, american in _BRITISH:
        word = pattern.sub(american, word)
    return str(_STEMMER.stemWord(word))


def word_family(word: str) -> str:
    """A looser key than the stem: the first five letters of it, so a word matches its derivations too
    ("founder" / "founded", "election" / "elected"); what a question's predicate is matched with.
    """
    return stem(word)[:5]


# --- sentences --------------------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9\"'(\[])")
_ABBREVIATION = re.compile(r"(?:\b(?:Dr|Mr|Mrs|Ms|St|Jr|Sr|Prof|vs|etc|No|Mt|Inc|Ltd|Co|e\.g|i\.e)|\b[A-Z])\.$")
_PARAGRAPH = re.compile(r"\S(?:.*?\S)?(?=\s*\n\s*\n|\s*$)", re.S)


def sentence_spans(text: str) -> list[tuple[int, int, bool]]:
    """(start, end, ends_paragraph) of each sentence, as character offsets into `text`."""
    spans: list[tuple[int, int, bool]] = []
    for para in _PARAGRAPH.finditer(text):
        start = para.start()
        pieces = []
        for m in _SENTENCE_END.finditer(para.group()):
            if _ABBREVIATION.search(para.group()[: m.start()]):
                continue  # "Dr. Who", "J. D. Drew": not a sentence end
            pieces.append((start, para.start() + m.start() + len(m.group().rstrip())))
            start = para.start() + m.end()
        pieces.append((start, para.end()))
        for i, (s, e) in enumerate(pieces):
            s += len(text[s:e]) - len(text[s:e].lstrip())
            if e > s:
                spans.append((s, e, i == len(pieces) - 1))
    return spans


# --- negation and pronouns --------------------------------------------------------------------------------

NEGATIONS = frozenset("not no never nor none neither cannot without".split())
"""Words that turn a statement or a question around."""
_NEGATED = re.compile(rf"\b(?:{'|'.join(sorted(NEGATIONS))})\b|n't\b")


def negated(text: str) -> bool:
    """Does `text` hold a negation word or a "n't"?"""
    return bool(_NEGATED.search(text.lower().replace("’", "'")))


LIST_ITEM = re.compile(r"^(?:[-*\u2022+]|\d{1,3}[.)])\s")
"""The opening of a list item as the extractors write it ("- V8: the C++ library ...", "1. Install ...")."""


PRONOUNS = ("it", "its", "he", "his", "she", "her", "they", "their")
"""Personal pronouns that stand for a passage's subject."""
PRONOUN = re.compile(rf"\b(?:{'|'.join(PRONOUNS)})\b", re.I)
PRONOUN_START = re.compile(rf"\s*(?:{'|'.join(PRONOUNS)}|this|these)\b", re.I)
"""A sentence about its passage's subject ("It is China's most populous city")."""


GLUED = re.compile(r"^(?:([^\W\d_]{3,})(\d+)|(\d+)([^\W\d_]{3,}))$")
"""A word glued to a number by a compressor ("moscow1533", "1533moscow"); not "k2", "19th", "2point5"."""


# --- names ------------------------------------------------------------------------------------------------

_NAME = re.compile(r"\b[A-Z][a-zA-Z\u00C0-\u024F'-]+")
_ENTITY = re.compile(r"[A-Z][\w.'-]*(?:\s+[A-Z][\w.'-]*)*")


def name_tokens(text: str) -> list[str]:
    """The canonical words of the capitalised names in `text` (a possessive's "s" is not one)."""
    return [t for n in _NAME.findall(text) for t in canonical_words(n) if t not in STOP and t != "s"]


def entities(text: str) -> list[tuple[str, ...]]:
    """The canonical words of each capitalised name of `text`, passage numbers aside, in order
    ("Amazon.com" -> ("amazon", "com"); "Wendell Meredith Stanley" -> one name of three words).
    """
    found = [
        tuple(t for t in canonical_words(e) if t not in STOP and t != "s")
        for e in _ENTITY.findall(PASSAGE_MARKER.sub(" ", text))
    ]
    return [e for e in found if e]


# --- the passages of a prompt's context ------------------------------------------------------------------

_NUMBER = r"\[\d+\]"
PASSAGE_MARKER = re.compile(_NUMBER)
"""A passage number ("[2]"), not a number of the text."""
PASSAGE_HEADING = re.compile(_NUMBER + r"(?:[^:\n\[]{0,80}:)?")
"""A passage's number and title ("[1] Brasília:")."""
PASSAGE_TITLE = re.compile("^" + _NUMBER + r" ([^:\n]+):", re.M)
"""A passage's number and title at the start of its line, the title captured ("[2] Shanghai:")."""
LEADING_TITLE = re.compile(r"^[^:\n]{1,80}:\s*")
"""A title before a text, with or without a number ("[1] Amazon:", "Amazon (company):")."""


def passage_heads(context: str) -> list[tuple[int, set[str]]]:
    """Where each passage starts, with the canonical words of its title."""
    return [(m.start(), set(canonical_words(m.group(1)))) for m in PASSAGE_TITLE.finditer(context)]


def title_at(heads: list[tuple[int, set[str]]], at: int) -> set[str]:
    """The title words of the passage that position `at` of the context sits in (none before the first)."""
    return next((words for start, words in reversed(heads) if start <= at), set())


def passage_heading(number: int, title: str | None) -> str:
    """How a prompt's context heads passage `number` (what PASSAGE_HEADING and PASSAGE_TITLE read back)."""
    return f"[{number}] {title}:" if title else f"[{number}]"


BLANK_PREFIX = re.compile(r"^\s*fill in the blank\s*:\s*", re.I)
"""The prefix of a generated cloze question."""
