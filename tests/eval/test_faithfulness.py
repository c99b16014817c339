"""Claim-level faithfulness with a fake (hash) embedder: lexical, number and name evidence."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from eval.faithfulness.checker import ClaimChecker, split_claims
from tests.fakes import HashEmbedder

CONTEXT = (
    "[1] K2: K2 is the second-highest mountain on Earth, at 8,611 metres above sea level. "
    "It lies in the Karakoram range on the border of Pakistan and China."
)
CASES = json.loads((Path(__file__).parent.parent / "data" / "faithfulness_cases.json").read_text())


@pytest.fixture(scope="module")
def checker() -> ClaimChecker:
    return ClaimChecker(HashEmbedder())


@pytest.mark.parametrize("case", CASES, ids=[c["answer"][:30] for c in CASES])
def test_faithfulness_case(checker: ClaimChecker, case: dict) -> None:
    result = checker.check(case["answer"], case.get("context", CONTEXT))
    assert result.score == case["expected"]
    assert result.status == ("no_claims" if case["expected"] is None else "ok")


def test_evidence_is_kept_per_claim(checker: ClaimChecker) -> None:
    result = checker.check("K2 is 8,611 metres high. It is in the Alps.", CONTEXT)
    assert [c.supported for c in result.claims] == [True, False]
    first, second = result.claims
    assert "8,611 metres" in first.best_span and first.numbers_ok and first.lexical >= 0.5
    assert not second.names_ok  # "Alps" is not in the context
    assert result.score == 0.5


def test_claims_are_sentences_and_abstentions_claim_nothing() -> None:
    assert split_claims("K2 is high. It is in Asia.") == ["K2 is high.", "It is in Asia."]
    assert split_claims("I don't know.") == [] and split_claims("   ") == []
    assert split_claims("The.") == []  # only stop words: nothing to check


def test_checker_holds_its_figure_on_real_labelled_tune_answers(minilm: Any) -> None:
    """150 real generator answers of the tune split (picked by sha256 of the id), labelled by reading them:
    the checker's balanced accuracy on claim-bearing ones stays near its tune figure (0.897 on all 631). A
    check that broke, or one that grew too eager, shows here; a synthetic set built from the checker's own
    word lists could not (its negatives are the checks themselves)."""
    import hashlib

    real = json.loads((Path(__file__).parent.parent.parent / "benchmarks/data/faithfulness_real.json").read_text())
    tune = sorted(
        (c for c in real["cases"] if c["split"] == "tune" and c["label"] != "no_claims"),
        key=lambda c: hashlib.sha256(c["id"].encode()).hexdigest(),
    )[:150]
    results = ClaimChecker(minilm).check_many([(c["answer"], c["context"] or "", c["question"]) for c in tune])
    flagged = [r.status != "no_claims" and r.score != 1.0 for r in results]
    supported = [c["label"] == "supported" for c in tune]
    kept = sum(not f for f, s in zip(flagged, supported, strict=True) if s) / sum(supported)
    caught = sum(f for f, s in zip(flagged, supported, strict=True) if not s) / (len(tune) - sum(supported))
    assert min(supported.count(True), supported.count(False)) >= 30  # both classes well represented
    assert (kept + caught) / 2 >= 0.85, (kept, caught)


CLAIM_CASES = json.loads((Path(__file__).parent.parent / "data" / "claim_cases.json").read_text())


@pytest.mark.parametrize("case", CLAIM_CASES, ids=[repr(c["answer"])[:30] for c in CLAIM_CASES])
def test_only_assertions_are_claims(case: dict) -> None:
    assert split_claims(case["answer"], case.get("question")) == case["claims"]


def test_an_answer_without_assertions_has_no_score(checker: ClaimChecker) -> None:
    for answer in ("3.", "The answer is:", "```\n```", ""):
        result = checker.check(answer, CONTEXT)
        assert result.status == "no_claims" and result.score is None and result.claims == []


@pytest.mark.parametrize(
    ("answer", "question", "context", "expected"),
    [
        ("1961", "He was prime minister from which year to 1962 and president from 1962 to 1964?", "", True),
        ("1962", "He was prime minister from which year to 1962 and president from 1962 to 1964?", "", False),
        ("In 1961.", "He was prime minister from which year to 1962 and president from 1962 to 1964?", "", True),
        (
            "China",
            "Fill in the blank: The road ran between ___ and Europe",
            "The road ran between China and Europe.",
            True,
        ),
        (
            "Europe",
            "Fill in the blank: The road ran between ___ and Europe",
            "The road ran between China and Europe.",
            False,
        ),
        ("6,400 km", "The road spanned over how many km of land?", "The road spanned over 6,400 km of land.", True),
        (
            "4,000",
            "The road spanned over how many km of land?",
            "The road spanned over 6,400 km (4,000 mi) of land.",
            False,
        ),
        ("Paris", "What is the capital of France?", "Paris is the capital of France.", None),  # no slot inside
    ],
)
def test_a_short_answer_must_fill_the_questions_slot(
    answer: str, question: str, context: str, expected: object
) -> None:
    from eval.faithfulness.question import fills_the_slot

    context = context or "He was prime minister from 1961 to 1962 and president from 1962 to 1964."
    assert fills_the_slot(answer, question, context) is expected


def test_checking_many_answers_at_once_gives_the_verdicts_of_checking_each(checker: ClaimChecker) -> None:
    items = [(c["answer"], c.get("context", CONTEXT), None) for c in CASES]
    items.append(("K2 is 8,611 metres high.", CONTEXT, "How high is K2?"))
    batched = checker.check_many(items)
    one_by_one = [ClaimChecker(HashEmbedder()).check(a, ctx, q) for a, ctx, q in items]
    assert [r.model_dump() for r in batched] == [r.model_dump() for r in one_by_one]
    assert sum(r.status == "no_claims" for r in batched) >= 1 and sum(r.status == "ok" for r in batched) >= 1


class _CountingEmbedder(HashEmbedder):
    """Counts the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += texts
        return super().embed_documents(texts)


def test_the_embedder_is_asked_only_where_meaning_can_change_the_verdict() -> None:
    embedder = _CountingEmbedder()
    checker = ClaimChecker(embedder)
    # Every word in one sentence (and the pairs holding it): decided by the words alone, nothing embedded.
    verbatim = checker.check("K2 lies in the Karakoram range on the border of Pakistan and China.", CONTEXT)
    assert verbatim.score == 1.0 and verbatim.claims[0].semantic is None and embedder.texts == []
    # No span covers half of its words: unsupported whatever the embedder says.
    unrelated = checker.check("Tigers hunt deer in Siberian forests.", CONTEXT)
    assert unrelated.score == 0.0 and embedder.texts == []
    # Half to 80 % of its words: meaning decides, so the claim and its one span are embedded.
    partial = checker.check("K2 is the second-highest peak on our planet.", CONTEXT)
    assert partial.claims[0].semantic is not None
    assert embedder.texts == ["K2 is the second-highest peak on our planet.", partial.claims[0].best_span]


TWO_PASSAGES = (
    "[1] Greenland: Greenland is the largest island in the world. Its capital and largest city is Nuuk.\n\n"
    "[2] Iceland: Iceland is a Nordic island country. Its capital and largest city is Reykjavík."
)


@pytest.mark.parametrize(
    ("answer", "supported"),
    [
        ("The capital of Iceland is Reykjavík.", True),  # "Its" under the title "Iceland"
        ("The capital of Greenland is Nuuk.", True),
        ("The capital of Greenland is Reykjavík.", False),  # "Greenland" titles another passage
    ],
)
def test_a_title_stands_for_a_name_only_in_its_own_passage(checker: ClaimChecker, answer: str, supported: bool) -> None:
    claim = checker.check(answer, TWO_PASSAGES).claims[0]
    assert claim.supported is supported and claim.names_ok is supported


def test_a_number_where_the_span_has_another_after_the_same_words(checker: ClaimChecker) -> None:
    context = "[1] Anwar Sadat: Sadat was president of Egypt from 15 October 1970 until his assassination in 1981."
    wrong = checker.check("Sadat was president of Egypt from 1970 until his assassination in 1970.", context)
    assert wrong.score == 0.0 and wrong.claims[0].numbers_ok and not wrong.claims[0].roles_ok
    # Dropping "15 October" before the year keeps it in place.
    right = checker.check("Sadat was president of Egypt from 1970 until his assassination in 1981.", context)
    assert right.score == 1.0


def test_the_word_cut_by_the_token_limit_is_not_checked(checker: ClaimChecker) -> None:
    context = "[1] Vijayanagara: The Vijayanagara Empire ruled much of southern India. It was established in 1336."
    head = "The Vijayanagara Empire ruled much of southern India, as the passage says in its first line."
    assert split_claims(f"{head} It was established in 13", None, context) == [head]
    # A whole word of the context at the cut stays: "in 1337" would be a claim about 1337.
    cut = f"{head} The Vijayanagara Empire was established in 1337"
    assert split_claims(cut, None, context)[-1] == "The Vijayanagara Empire was established in 1337"
    assert checker.check(cut, context).claims[-1].numbers_ok is False


@pytest.mark.parametrize(
    ("answer", "supported"),
    [
        ("Wendell Meredith Stanley crystallised the virus.", True),  # one three-word name: no order to flip
        ("Carl Linnaeus named the genus Tagetes in 1753.", True),  # two names, voice and order flipped
        ("The genus Tagetes named Carl Linnaeus in 1753.", False),  # active voice, the names exchanged
    ],
)
def test_passive_rewrites_keep_whole_names_in_their_roles(checker: ClaimChecker, answer: str, supported: bool) -> None:
    context = (
        "[1] Viruses: The virus was crystallised by Wendell Meredith Stanley. "
        "The genus Tagetes was formally named by Carl Linnaeus in 1753."
    )
    assert checker.check(answer, context).claims[0].roles_ok is supported


def test_a_by_in_a_clause_without_the_claims_predicate_is_no_change_of_voice(checker: ClaimChecker) -> None:
    context = (
        "[1] The Little Prince: The Little Prince is a novella written and illustrated by French writer Antoine "
        "de Saint-Exupéry. It was first published in the United States in April 1943 and was published "
        "posthumously in France following liberation."
    )
    kept = checker.check("The Little Prince was published in France.", context)
    assert kept.claims[0].roles_ok is True
    # The same clause with the claim's predicate does change voice: the names must change places.
    swapped = checker.check("The Little Prince illustrated Antoine de Saint-Exupéry.", context)
    assert swapped.claims[0].supported is False


def test_two_words_of_another_sentence_recombine_the_context(checker: ClaimChecker) -> None:
    context = (
        "[1] Walking: In the United Kingdom, the word walking describes all forms of walking on foot. "
        "It is a low-impact exercise.\n\n[2] Hiking: Hiking is the preferred term in Canada for long trails."
    )
    mixed = checker.check("In the United Kingdom, the preferred term hiking describes all forms of walking.", context)
    assert mixed.score == 0.0 and not mixed.claims[0].roles_ok
    one = checker.check("In the United Kingdom, the word walking describes all forms of walking.", context)
    assert one.score == 1.0


@pytest.mark.parametrize(
    ("answer", "context", "question", "score"),
    [
        # A question's name the context lacks entirely is a retrieval miss, not a premise.
        ("Ferdowsi was born in Balkh.", "[1] Rumi: Rumi was born in Balkh in 1207.", "Where was Ferdowsi born?", 0.0),
        # Question words a compressor dropped, with another name of the question kept, are premises.
        (
            "The experiment was performed by Robert Millikan in 1909.",
            "[1] Oil drop experiment: The experiment was performed by Robert Millikan and Fletcher9 the charge.",
            "The oil drop experiment was performed by whom and Harvey Fletcher in 1909?",
            1.0,
        ),
        # A decimal is one number ("2.5"), never its digits; a glued "published1" is two words.
        ("By 2010 the town had 2 million people.", "[1] Town: By 2010 the town had 2.5 million people.", None, 0.0),
        (
            "Notre-Dame is a novel by Victor Hugo.",
            "[1] Notre-Dame: Notre-Dame is a novel by Victor Hugo, published1.",
            None,
            1.0,
        ),
        # A restated question's fill must stand where the slot is.
        (
            "Stuttgart lies in a valley known as the Neckar river and lies an hour from the forest.",
            "[1] Stuttgart: Stuttgart lies in a valley known as the Kessel and lies an hour from the forest.",
            "Fill in the blank: Stuttgart lies in a valley known as the ___ and lies an hour from the forest",
            0.0,
        ),
        # A number listed after "and" is in its place; a pronoun stands for the span's subject, not its object.
        (
            "The population was 12,000 in 2000.",
            "[1] Town: The population was 5,000 in 1900 and 12,000 in 2000.",
            None,
            1.0,
        ),
        ("Jones beat Brown in 1991.", "[1] Smith: Smith defeated Jones in 1990. In 1991 he beat Brown.", None, 0.0),
        ("Smith beat Brown in 1991.", "[1] Smith: Smith defeated Jones in 1990. In 1991 he beat Brown.", None, 1.0),
        # "and is" starts a clause, as a comma does: a merge of two sentences keeps each name in its role.
        (
            "Beijing is the capital of China and is located in Northern China.",
            "[1] Beijing: Beijing is the capital of China. It is located in Northern China and governs 16 districts.",
            None,
            1.0,
        ),
        # When the voice flips, a surname stands for its whole name, titles included.
        ("Tagetes named the genus Linnaeus.", "[1] Tagetes: The genus Tagetes was named by Carl Linnaeus.", None, 0.0),
        ("Linnaeus named the genus Tagetes.", "[1] Tagetes: The genus Tagetes was named by Carl Linnaeus.", None, 1.0),
    ],
)
def test_review_cases(checker: ClaimChecker, answer: str, context: str, question: str | None, score: float) -> None:
    assert checker.check(answer, context, question).score == score


def test_list_items_and_short_answers_are_not_cut() -> None:
    listed = "The capitals are:\n- Nuuk is the capital of Greenland\n- Reykjavik is the capital of Iceland"
    assert split_claims(listed)[-1] == "Reykjavik is the capital of Iceland"
    assert split_claims("The answer is 8. The band released eight studio albums in their long career.")[0] == "8."


def test_the_engines_cut_flag_decides_over_the_guess() -> None:
    short = "Vijayanagara ruled southern India. It was established in 13"
    assert split_claims(short, cut=None) == ["Vijayanagara ruled southern India.", "It was established in 13"]
    assert split_claims(short, cut=True) == ["Vijayanagara ruled southern India."]  # the engine says: cut
    long = "Vijayanagara was a late medieval Hindu empire that ruled much of southern India. It was founded in 1336"
    assert (
        split_claims(long, cut=None)[-1]
        == "Vijayanagara was a late medieval Hindu empire that ruled much of southern India."
    )
    assert split_claims(long, cut=False)[-1] == "It was founded in 1336"  # finished, just without a full stop


def test_a_fragment_cut_after_a_lead_in_is_no_claim() -> None:
    context = "[1] Hangzhou: Hangzhou lies at the head of Hangzhou Bay. It was founded in 1885 by the company."
    head = "Hangzhou lies at the head of Hangzhou Bay."
    # The engine stopped at the limit inside the answer's word ("Hang" of "Hangzhou", "1" of "1885").
    assert split_claims(f"{head}\n\nThe answer is: Hang", None, context, cut=True) == [head]
    assert split_claims(f"{head}\n\nThe answer is: 1", None, context, cut=True) == [head]
    # A whole word of the context is an answer even at the cut; without the cut, "1" is the answer given.
    assert split_claims(f"{head}\n\nThe answer is: 1885", None, context, cut=True)[-1] == "1885"
    assert split_claims(f"{head}\n\nThe answer is: 1", None, context, cut=False)[-1] == "1"
    # A word joined by a dash is cut at its last piece ("Cambodian–Viet" of "Cambodian–Vietnamese").
    war = "[1] Pol Pot: Pol Pot was overthrown in 1979 during the Cambodian–Vietnamese War."
    cut = "Pol Pot was overthrown in 1979 in Phnom Penh during the Cambodian–Viet"
    assert split_claims(cut, None, war, cut=True) == ["Pol Pot was overthrown in 1979 in Phnom Penh during the"]


def test_a_possessive_is_not_a_name(checker: ClaimChecker) -> None:
    context = "[1] Jonathan Edwards: Edwards preached in Northampton. His work gave rise to New England theology."
    claim = checker.check("Jonathan Edwards's work gave rise to New England theology.", context).claims[0]
    assert claim.names_ok and claim.supported


def test_a_restated_question_about_another_subject_has_no_slot_to_fill(checker: ClaimChecker) -> None:
    context = "[1] San Salvador: San Salvador is the capital and largest city of El Salvador."
    question = "Fill in the blank: Honduras's capital and largest city is ___"
    other = checker.check("El Salvador's capital and largest city is San Salvador.", context, question)
    assert other.claims[0].slot_ok is None and other.score == 1.0
    # The question's own subject with a fill the context does not give there is still checked.
    same = checker.check("Honduras's capital and largest city is San Salvador.", context, question)
    assert same.score == 0.0


@pytest.mark.parametrize(
    ("answer", "supported"),
    [
        ("Romeo and Juliet is a tragedy written by William Shakespeare about two lovers.", True),
        ("Romeo and Juliet is a tragicomedy written by William Shakespeare about two lovers.", False),
        ("Isis, with her sister Isis, searched Egypt to find each part of him.", False),
        ("Isis, with her sister Nephthys, searched Egypt to find each part of him.", True),
        ("Romeo and Juliet is a play written by William Shakespeare about two lovers.", True),  # no near form
    ],
)
def test_a_near_copy_that_swaps_a_name_or_a_word_form(checker: ClaimChecker, answer: str, supported: bool) -> None:
    context = (
        "[1] Romeo and Juliet: Romeo and Juliet is a tragedy written by William Shakespeare about two lovers. "
        "It is a play.\n\n[2] Isis: Isis, with her sister Nephthys, searched Egypt to find each part of him."
    )
    result = checker.check(answer, context)
    assert (result.score == 1.0) is supported
    assert result.claims[0].roles_ok is supported


def test_a_pair_of_sentences_never_spans_two_passages(checker: ClaimChecker) -> None:
    context = (
        "[1] Baffin Island: Baffin Island lies in Nunavut. The Nares Strait connects Baffin Bay with the Arctic.\n\n"
        "[2] Kingston: Kingston is the capital city of Jamaica."
    )
    wrong = checker.check("The capital city of Baffin Island is Kingston, Jamaica.", context)
    assert wrong.score == 0.0 and "[1]" not in wrong.claims[0].best_span
    right = checker.check("Kingston is the capital city of Jamaica.", context)
    assert right.score == 1.0


def test_a_name_ending_in_est_is_no_superlative(checker: ClaimChecker) -> None:
    context = "[1] Mount Everest: Its height was most recently measured in 2020 as 8,848.86 m."
    claim = checker.check("The height of Mount Everest is 8,848.86 m.", context).claims[0]
    assert claim.attributes_ok and claim.supported
    # A real superlative the span lacks is still one.
    assert not checker.check("The greatest height of Mount Everest is 8,848.86 m.", context).claims[0].attributes_ok


@pytest.mark.parametrize(
    ("answer", "question", "supported"),
    [
        ("The headquarter of Microsoft is Microsoft Corporation.", "What is the headquarter of Microsoft?", False),
        ("The founder of Amazon is Amazon.com.", "Who is the founder of Amazon?", False),
        ("The founder of Amazon is Jeff Bezos.", "Who is the founder of Amazon?", True),
        ("The capital of Mexico is Mexico City.", "What is the capital of Mexico?", True),  # its own subject, rightly
    ],
)
def test_the_question_s_subject_is_not_its_answer(
    checker: ClaimChecker, answer: str, question: str, supported: bool
) -> None:
    context = (
        "[1] Microsoft: Microsoft Corporation is an American technology company headquartered in Redmond.\n\n"
        "[2] Amazon: Amazon.com, Inc. is an American company. Founded in 1994 by Jeff Bezos in Bellevue, the "
        "company began as an online marketplace.\n\n"
        "[3] Mexico City: Mexico City is the capital and largest city of Mexico."
    )
    result = checker.check(answer, context, question)
    assert (result.score == 1.0) is supported
    assert (result.claims[0].slot_ok is not False) is supported  # the check that decides


def test_a_verbatim_copy_says_what_it_copies(checker: ClaimChecker) -> None:
    context = "[1] Boston: Boston is the capital and most populous city of the U.S. state of Massachusetts."
    answer = "Boston (city): Boston is the capital and most populous city of the U.S. state of Massachusetts."
    result = checker.check(answer, context, "What state is Boston located?")
    assert result.score == 1.0 and result.claims[0].slot_ok is None


def test_a_sentence_that_starts_with_a_pronoun_is_about_its_passage(checker: ClaimChecker) -> None:
    context = (
        "[1] Beijing: Beijing is the capital city of China.\n\n"
        "[2] Shanghai: Shanghai is a direct-administered municipality in China. It has a population of 30 million "
        "in its urban area, making it China's most populous city and the fifth-largest city in the world."
    )
    question = "What is the largest city of China?"
    assert checker.check("The largest city of China is Shanghai.", context, question).score == 1.0
    assert checker.check("The largest city of China is Beijing.", context, question).score == 0.0


def test_of_two_clauses_stating_the_predicate_the_one_naming_the_subject_decides(checker: ClaimChecker) -> None:
    context = (
        "[1] Pakistan: Pakistan is a country in South Asia. Islamabad is the nation's capital.\n\n"
        "[2] Lahore: Lahore is the capital and largest city of the Pakistani province of Punjab."
    )
    question = "What is the capital of Pakistan?"
    assert checker.check("The capital of Pakistan is Islamabad.", context, question).score == 1.0
    assert checker.check("The capital of Pakistan is Lahore.", context, question).score == 0.0
    later = context.replace("[2] Lahore: Lahore", "[2] Lahore: Lahore is a city. Lahore")  # not its passage's first
    assert checker.check("The capital of Pakistan is Lahore.", later, question).score == 0.0
    # A demonym right before the predicate names the subject ("the Japanese capital").
    tokyo = "[1] Tokyo: Tokyo is the Japanese capital. [2] Osaka: Osaka is the capital of Osaka Prefecture in Japan."
    assert checker.check("The capital of Japan is Tokyo.", tokyo, "What is the capital of Japan?").score == 1.0


def test_the_question_s_subject_alone_is_no_answer(checker: ClaimChecker) -> None:
    context = "[1] Madagascar: Madagascar is an island country. Its capital and largest city is Antananarivo."
    question = "What is the capital city of Madagascar?"
    assert checker.check("Madagascar.", context, question).score == 0.0
    assert checker.check("Antananarivo.", context, question).score == 1.0


@pytest.mark.parametrize(
    ("answer", "context", "question"),
    [  # review cases: each is supported and must stay so
        (
            "Coldplay.",
            "[1] Coldplay: Coldplay is a band with four members.",
            "Which band has more members, Muse or Coldplay?",
        ),
        ("Mexico.", "[1] Mexico City: Mexico City is the capital of Mexico.", "In which country is Mexico City?"),
        (
            "Singapore.",
            "[1] Singapore: Singapore is a city-state. Its capital is Singapore.",
            "What is the capital of Singapore?",
        ),
        (
            "The capital of Luxembourg is Luxembourg City.",
            "[1] Luxembourg City: Luxembourg City is the capital of the Grand Duchy of Luxembourg.",
            "What is the capital of Luxembourg?",
        ),
        (
            "Lionel Messi played for Inter Miami in Major League Soccer.",
            "[1] Lionel Messi: Lionel Messi plays for Inter Miami in Major League Soccer.",
            None,
        ),
        (
            "The festival is organized by the city council every summer.",
            "[1] Festival: The festival is organised by the city council every summer.",
            None,
        ),
        (
            "In 1964, Muhammad Ali won the world heavyweight title from Sonny Liston.",
            "[1] Muhammad Ali: In 1964, Clay won the world heavyweight title from Sonny Liston.",
            None,
        ),
    ],
)
def test_review_cases_stay_supported(checker: ClaimChecker, answer: str, context: str, question: str | None) -> None:
    assert checker.check(answer, context, question).score == 1.0


def test_a_copy_about_another_subject_still_answers_to_the_question(checker: ClaimChecker) -> None:
    context = "[1] Albert Einstein: Einstein was born in Ulm.\n\n[2] Max Planck: He was born in Kiel in 1858."
    assert checker.check("He was born in Kiel in 1858.", context, "Where was Albert Einstein born?").score == 0.0


def test_a_cut_answer_keeps_a_country_the_context_names_by_its_demonym() -> None:
    context = "[1] Sushi: Sushi is a traditional Japanese dish of prepared rice."
    head = "Sushi is a traditional dish of prepared rice, as the passage says in its very first line."
    assert split_claims(f"{head}\n\nThe answer is: Japan", None, context, cut=True)[-1] == "Japan"


def test_claims_beside_a_disclaimer_are_checked_and_the_disclaimer_is_no_claim() -> None:
    answer = "Paris was founded in 1200 by Clovis. The context does not mention who designed it."
    assert split_claims(answer) == ["Paris was founded in 1200 by Clovis."]
    assert split_claims("K2 is 9,000 metres high, but I cannot tell from the passages who climbed it first.") == [
        "K2 is 9,000 metres high"
    ]
    assert split_claims("Unfortunately, the passages do not mention his birthplace.") == []
