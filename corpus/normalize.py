"""Text normalisation shared by dataset labels and answer metrics, so both read a text the same way."""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

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
