"""An offline decomposer grounded in the vocabulary: keep the spans of a description ICD-10-CM knows.

A population description mixes conditions with drugs, procedures, settings, lab thresholds and
time windows. Rather than list those qualifiers (a list written against one set of descriptions
only matches that set's wording), every candidate span is checked against the ICD-10-CM
diagnosis vocabulary itself, through the BM25 index's tokens:

1. normalise (lower case, British spellings, the lay-term table in :mod:`phenoforge.agent.lay_terms`);
2. cut into chunks at punctuation and list conjunctions ("and", "or", "plus", ...);
3. in each chunk, find the longest word spans that name a diagnosis: all their words occur together
   in one diagnosis (chapters A-S: conditions, not drugs/poisonings, external causes or Z factors),
   at least one word is the head noun of a diagnosis name or inclusion term ("cirrhosis" in
   "Cirrhosis of liver", not "liver"), and the best BM25 hit for the span is a diagnosis;
4. attach stage/type/class/severity modifiers next to a kept span ("stage 4", "severe");
5. a span that only names a symptom or finding (chapter R) is kept only when no disease span was found.

With the dense index (``dense=``), every candidate span is also embedded (one model call per
description) and graded by its nearest codes: a span is a condition only when one of its nearest
codes is a diagnosis at cosine ``DENSE_MIN`` or more ("intensive care" is nearest to nothing
diagnostic), and a condition span is dropped when a longer candidate span around it is nearer to a
non-diagnosis code (a procedure, device, drug or status: Z, T, V-Y) than the span is to any diagnosis
(by ``DENSE_MARGIN``): "coronary artery" inside "coronary artery bypass grafting" names the site of a
procedure; "blood pressure" alone is a measurement.

Words that describe the population rather than a condition (people, demographics, certainty,
measurement units) are never part of a span; the list is general English, in :data:`FRAMING_WORDS`.
Spans are graded by the vocabulary, so an unseen drug, procedure or setting simply matches no
diagnosis and is dropped, whatever its wording.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb

from phenoforge.agent.lay_terms import LAY_TERMS, SPELLING
from phenoforge.agent.words import WORD_SYNONYMS
from phenoforge.caches import ProcessCache
from phenoforge.engine.bm25 import BM25Index, get_bm25_index
from phenoforge.engine.codes import code_key, codes_in_text
from phenoforge.engine.db import build_id, connect
from phenoforge.engine.query import STOPWORDS, fold, tokenize
from phenoforge.engine.schema import ICD10CM

if TYPE_CHECKING:
    from phenoforge.engine.dense import DenseRetriever

PHRASE_KINDS = ("category", "subcategory")  # extensions (7th characters) repeat their parent's name
DENSE_MIN = 0.6
"""Cosine a span needs to its nearest diagnosis to count as a condition (set on the development cases)."""
DENSE_MARGIN = 0.03
"""How much nearer a non-diagnosis code must be than the nearest diagnosis to overrule it ("HIV infection"
is nearest to Z21, asymptomatic HIV status, and a hair further from B20; "blood pressure" is clearly nearer
to a blood-pressure examination than to any diagnosis)."""
DENSE_DEPTH = 10
"""Nearest codes read per span (a 7th-character family can fill the first few)."""


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Words that frame the population, never a condition (demographics, people, certainty, counting and
# units of measurement). Written from general English; a word here is never part of a span.
FRAMING_WORDS = _word_set("""
patient patients participant participants subject subjects individual individuals people person persons adult
adults child children adolescent adolescents infant infants man men woman women male female elderly older
younger aged age ages year years old veteran veterans resident residents population cohort outpatient
outpatients inpatient inpatients beneficiary beneficiaries volunteer volunteers study trial presenting presented
presentation admitted admission referred referral scheduled undergoing enrolled attending history diagnosis
diagnosed diagnoses documented confirmed confirmation suspected known new newly current currently former
previous previously prior recent recently existing established ongoing least more less than greater higher
above between within during after before since over under hour hours day days week weeks month months time
times weekly daily score scores count level levels value values ratio index mg dl ml kg mm m2 mm3 min cells l
mmol who whom which that this these those their there have has had having been being were was will would not no
any all each every either both one two three four five six seven eight nine ten including include includes such
per via using taking take receiving received requiring required
""")

# Modifiers that change the diagnosis and stay attached to the condition they qualify.
SEVERITY_WORDS = _word_set("""
acute chronic severe moderate mild recurrent persistent metastatic malignant unstable decompensated compensated
end-stage advanced intermittent paroxysmal permanent proliferative
""")
NUMBERED_MODIFIER = re.compile(r"\b(stage|type|class|grade)\s+(\d+[a-c]?|i{1,3}[a-c]?|iv|v)\b")
ROMAN = {"i": "1", "ii": "2", "iii": "3", "iv": "4", "v": "5"}
NUMBER_WORDS = {"one": "1", "two": "2", "three": "3", "four": "4", "five": "5"}

# Words that name no particular condition: a span must hold a word that is not one of these.
GENERIC_WORDS = _word_set("""
disease diseases disorder disorders condition conditions syndrome syndromes unspecified specified other nos type
stage class grade status
""")
CONNECTORS = frozenset({"of", "with", "without", "to", "the", "a", "an"})
"""Function words ICD-10-CM names use inside a condition ("cirrhosis of liver"); other ones end a span."""
PREGNANCY_WORDS = frozenset({"pregnancy", "pregnant", "trimester", "gestation", "antenatal", "prenatal"})
"""Context that moves a condition to ICD-10-CM chapter 15 (O codes: conditions in pregnancy)."""
PREGNANCY_CONTEXT = PREGNANCY_WORDS | {"first", "second", "third", "early", "late"}
"""A span of only these words ("second trimester of pregnancy") says when, not what."""
CHUNK_BREAK = re.compile(r"[,;:()\[\]/]|\s(?:and/or|and|or|plus|but|versus|vs\.?|as well as|with or without)\s")
NAME_CUT = re.compile(
    r",|\s(?:of|with|without|due to|in|following|complicating|associated with|and|or|for|during|from|by|after|on|at"
    r"|as)\s"
)
NAME_PARTS = re.compile(f"({NAME_CUT.pattern})")


_TOKENS = re.compile(r"[a-z0-9]+")
_NONESSENTIAL = re.compile(r"\([^)]*\)|\[[^]]*\]")  # ICD-10-CM puts nonessential modifiers in parentheses
_LISTED = re.compile(r"^[^,]+,[^,]+ or ")  # "Cardiac, heart or myocardial failure": a list, not "cardiac"
_NOT_HEADS = frozenset({"unspecified", "nos", "other", "specified"})


def _plural_only(token: str) -> str:
    if len(token) > 4 and token.endswith("s") and not token.endswith(("ss", "is", "us")):
        return token[:-1]
    return token


def _fold_plural(token: str) -> str:
    """Plural folded, then the same adjective/noun merging as the curated name rule (renal = kidney)."""
    token = WORD_SYNONYMS.get(token, token)
    if len(token) > 4 and token.endswith("s") and not token.endswith(("ss", "is", "us")):
        token = token[:-1]
    return WORD_SYNONYMS.get(token, token)


def _is_diagnosis(code: str) -> bool:
    """Chapters A-S: diseases, symptoms, findings and injuries (not T poisonings, external causes, Z)."""
    return bool(code) and code[0] in "ABCDEFGHIJKLMNOPQRS"


@dataclass
class VocabularyGrounding:
    """What the decomposer asks of the vocabulary, built once per vocabulary build (about 2 s)."""

    index: BM25Index
    postings: dict[str, set[int]]
    heads: frozenset[str]
    head_pairs: frozenset[tuple[str, str]]
    finding_rows: frozenset[int]
    solo: frozenset[str]

    @classmethod
    def build(cls, con: duckdb.DuckDBPyConnection) -> VocabularyGrounding:
        index = get_bm25_index(con)
        extensions = {
            str(code)
            for (code,) in con.execute(
                "SELECT code FROM concept WHERE vocabulary_id = ? AND kind = 'extension'", [ICD10CM]
            ).fetchall()
        }
        postings: dict[str, set[int]] = {}
        findings: set[int] = set()
        for row, (code, tokens) in enumerate(zip(index.codes, index.tokens, strict=True)):
            if not _is_diagnosis(code) or code in extensions:  # a 7th character adds encounter words only
                continue
            if code.startswith("R"):
                findings.add(row)
            for token in set(tokens):
                postings.setdefault(_fold_plural(token), set()).add(row)
        heads: set[str] = set()
        pairs: set[tuple[str, str]] = set()
        solo: set[str] = set()
        for phrase in _diagnosis_phrases(con):
            name = _NONESSENTIAL.sub(" ", phrase.lower() if phrase.isascii() else fold(phrase))
            parts = NAME_PARTS.split(name)  # piece, separator, piece, separator, ...
            # the name's own head, and the head of each complication it is "with" ("... with ketoacidosis")
            for position in range(0, len(parts), 2):
                piece = parts[position]
                if position and parts[position - 1].strip() != "with":
                    continue
                words = [
                    _fold_plural(token)
                    for token in _TOKENS.findall(piece)
                    if token not in STOPWORDS and token not in _NOT_HEADS
                ]
                if not words:
                    continue
                named = [word for word in words if word not in GENERIC_WORDS and word not in SEVERITY_WORDS]
                if position == 0 and len(named) == 1 and words[-1] == named[0] and not _LISTED.match(name):
                    # "Sepsis, unspecified organism" (not "Liver disease": liver is a site); the surface word,
                    # so an adjective ("diabetic", "cardiac") never stands alone for its noun
                    surface = [_plural_only(token) for token in _TOKENS.findall(piece) if token not in STOPWORDS]
                    own = [word for word in surface if word not in GENERIC_WORDS and word not in _NOT_HEADS]
                    if own:
                        solo.add(own[-1])
                if words[-1] in GENERIC_WORDS:
                    if len(words) > 1:
                        pairs.add((words[-2], words[-1]))
                else:
                    heads.add(words[-1])
        return cls(index, postings, frozenset(heads), frozenset(pairs), frozenset(findings), frozenset(solo))

    def rows_with_all(self, tokens: list[str]) -> set[int]:
        rows: set[int] | None = None
        for token in sorted(set(tokens), key=lambda item: len(self.postings.get(item, ()))):
            found = self.postings.get(token)
            if not found:
                return set()
            rows = set(found) if rows is None else rows & found
            if not rows:
                return set()
        return rows or set()

    def has_head(self, tokens: list[str]) -> bool:
        """Whether the last word of ``tokens`` (a phrase cut before "of"/"with") heads a diagnosis name.

        English noun phrases are head-final: "cardiac surgery" is a surgery, "chronic kidney disease"
        a disease of the kidney (generic heads need the word before them: ("kidney", "disease")).
        """
        while tokens and (tokens[-1] in ("stage", "type", "class", "grade") or tokens[-1].isdigit()):
            tokens = tokens[:-1]
        if not tokens:
            return False
        if tokens[-1] in GENERIC_WORDS:
            return len(tokens) > 1 and (tokens[-2], tokens[-1]) in self.head_pairs
        return tokens[-1] in self.heads


def _diagnosis_phrases(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Names and inclusion terms of diagnosis codes: what a condition is called in ICD-10-CM."""
    kinds = ", ".join("?" for _ in PHRASE_KINDS)
    rows = con.execute(
        f"""
        SELECT c.code, c.name FROM concept c WHERE c.vocabulary_id = ? AND c.kind IN ({kinds})
        UNION
        SELECT c.code, n.text FROM concept_note n JOIN concept c ON c.concept_id = n.concept_id
        WHERE c.vocabulary_id = ? AND c.kind IN ({kinds}) AND n.note_type IN ('inclusion_term', 'includes')
        """,
        [ICD10CM, *PHRASE_KINDS, ICD10CM, *PHRASE_KINDS],
    ).fetchall()
    return [str(text) for code, text in rows if _is_diagnosis(str(code))]


_GROUNDINGS: ProcessCache[str, VocabularyGrounding] = ProcessCache("vocabulary groundings")
_LOCK = threading.Lock()


def get_grounding(con: duckdb.DuckDBPyConnection) -> VocabularyGrounding:
    """The grounding of ``con``'s vocabulary build, built once and shared."""
    cursor = con.cursor()
    try:
        build = build_id(cursor)
        with _LOCK:
            grounding = _GROUNDINGS.get(build)
            if grounding is None:
                grounding = VocabularyGrounding.build(cursor)
                _GROUNDINGS[build] = grounding
    finally:
        cursor.close()
    return grounding


# --- text preparation ------------------------------------------------------------------------

_LAY = re.compile(
    r"(?<![\w-])(" + "|".join(re.escape(lay) for lay in sorted(LAY_TERMS, key=len, reverse=True)) + r")s?(?![\w-])"
)
_SPELLING = re.compile(r"\b(" + "|".join(sorted(SPELLING, key=len, reverse=True)) + r")")


def normalise(description: str) -> str:
    """Lower case, quotes and dashes folded, British spellings and lay terms replaced."""
    text = fold(description).replace("’", "'").replace("–", "-").replace("—", " , ")
    text = _SPELLING.sub(lambda match: SPELLING[match.group(1)], text)
    text = _LAY.sub(lambda match: f" {LAY_TERMS[match.group(1)][0]} ", text)
    text = re.sub(r"(\d)\s*-\s*(\d)", r"\1 to \2", text)  # "2-3" is a range, not a word
    text = re.sub(r"\b(type|stage|class|grade)\s+(i{1,3}|iv|v)\b", lambda m: f"{m.group(1)} {ROMAN[m.group(2)]}", text)
    text = re.sub(
        r"\b(type|stage|class|grade)\s+(one|two|three|four|five)\b",
        lambda m: (
            f"{m.group(1)} {ROMAN[{'one': 'i', 'two': 'ii', 'three': 'iii', 'four': 'iv', 'five': 'v'}[m.group(2)]]}"
        ),
        text,
    )
    text = _COORDINATED.sub(_spell_out_coordinated, text)
    return " ".join(text.split())


_COORDINATED = re.compile(r"\b(type|stage|class|grade) (\d+[a-c]?) (or|and|to) (\d+[a-c]?|i{1,3}|iv|v)\b")


def _spell_out_coordinated(match: re.Match[str]) -> str:
    """ "stage 3 or 4" -> "stage 3 or stage 4"; "stage 2 to 4" -> every stage between (so each keeps its word)."""
    keyword, first, joiner, last = match.groups()
    last = ROMAN.get(last, last)
    if joiner == "to" and first.isdigit() and last.isdigit() and 0 < int(last) - int(first) <= 4:
        return " or ".join(f"{keyword} {number}" for number in range(int(first), int(last) + 1))
    return f"{keyword} {first} {joiner} {keyword} {last}"


@dataclass
class _Word:
    text: str
    token: str  # search token ("" for punctuation-only words)
    role: str  # stop, framing, number, modifier, content


def _words(chunk: str) -> list[_Word]:
    out: list[_Word] = []
    for raw in chunk.split():
        tokens = tokenize(raw)
        token = _fold_plural(tokens[-1]) if tokens else ""
        if raw in CONNECTORS:
            role = "connector"
        elif not tokens or raw in STOPWORDS:
            role = "stop"
        elif token in FRAMING_WORDS or tokens[0] in FRAMING_WORDS:
            role = "framing"
        elif all(part.isdigit() for part in tokens) or re.fullmatch(r"[\d.%<>=≥≤+]+", raw):
            role = "number"
        elif token in SEVERITY_WORDS or raw in SEVERITY_WORDS:
            role = "modifier"
        else:
            role = "content"
        out.append(_Word(raw.strip(".'\""), token, role))
    return out


def _span_tokens(words: list[_Word]) -> list[str]:
    tokens: list[str] = []
    for word in words:
        if word.role in ("content", "modifier"):
            tokens.extend(_fold_plural(token) for token in tokenize(word.text))
    return tokens


def _is_care_complication(code: str) -> bool:
    """T80-T88, complications of surgical and medical care: a condition ("postprocedural septic shock")
    that is also the mark of a procedure or device ("breakdown of coronary bypass graft")."""
    return code[:1] == "T" and "80" <= code[1:3] <= "88"


@dataclass(frozen=True)
class _Grade:
    """What the dense index says about one span."""

    diagnosis: float  # cosine to the nearest diagnosis (chapters A-S, or a complication of care)
    own_other: float  # cosine of the nearest code when it is a procedure, device, drug or status, else 0
    context_other: float  # the same, a complication of care counting as a procedure: read for longer spans

    @classmethod
    def of(cls, ranking: list[tuple[str, float]]) -> _Grade:
        diagnosis = max(
            (score for code, score in ranking if _is_diagnosis(code) or _is_care_complication(code)), default=0.0
        )
        if not ranking:
            return cls(diagnosis, 0.0, 0.0)
        nearest, score = ranking[0]
        own = 0.0 if _is_diagnosis(nearest) or _is_care_complication(nearest) else score
        return cls(diagnosis, own, 0.0 if _is_diagnosis(nearest) else score)


def _diagnosis_of(grades: dict[tuple[int, int], _Grade], start: int, end: int) -> float:
    grade = grades.get((start, end))
    return grade.diagnosis if grade is not None else 0.0


@dataclass
class _Span:
    start: int
    end: int
    tokens: list[str]
    finding: bool


class GroundedDecomposer:
    """``str -> list[str]``: the condition spans of a description, as the vocabulary sees them."""

    __name__ = "offline"

    def __init__(self, grounding: VocabularyGrounding, max_span: int = 8, dense: DenseRetriever | None = None) -> None:
        self.grounding = grounding
        self.max_span = max_span
        self.dense = dense if dense is not None and dense.is_ready else None
        self._code_of_key = {code.replace(".", ""): code for code in grounding.index.codes}

    def __repr__(self) -> str:
        return "GroundedDecomposer(offline)"

    # the vocabulary test of one span
    def _condition(self, words: list[_Word]) -> _Span | None:
        if words[0].role not in ("content", "modifier") or words[-1].role not in ("content", "modifier"):
            return None
        if any(word.role in ("framing", "stop") for word in words):
            return None
        tokens = _span_tokens(words)
        named = [token for token in tokens if token not in GENERIC_WORDS and token not in SEVERITY_WORDS]
        surface = [
            _plural_only(token)
            for word in words
            if word.role in ("content", "modifier")
            for token in tokenize(word.text)
            if token not in GENERIC_WORDS and token not in SEVERITY_WORDS
        ]
        bare = len(named) == 1 and tokens[-1] not in GENERIC_WORDS  # one word, not "kidney disease"
        if not named or (bare and (not surface or surface[-1] not in self.grounding.solo)):
            return None  # one word must name a diagnosis on its own ("sepsis"), not qualify one ("emergency")
        rows = self.grounding.rows_with_all(tokens)
        before_connector = next((i for i, word in enumerate(words) if word.role == "connector"), len(words))
        if not rows or not self.grounding.has_head(_span_tokens(words[:before_connector])):
            return None
        ranked = self.grounding.index.ranking(" ".join(word.text for word in words), 5)
        if not ranked or not any(_is_diagnosis(code) for code, _score in ranked[:3]):
            return None
        finding = all(row in self.grounding.finding_rows for row in rows)
        return _Span(0, 0, tokens, finding)

    def _candidates(self, words: list[_Word]) -> list[tuple[int, int]]:
        """Every ``(start, end)`` that could be a span: content words at both ends, no framing or stop word."""
        out: list[tuple[int, int]] = []
        for start in range(len(words)):
            for end in range(start + 1, min(start + self.max_span, len(words)) + 1):
                if words[end - 1].role in ("framing", "stop"):
                    break
                if words[start].role in ("content", "modifier") and words[end - 1].role in ("content", "modifier"):
                    out.append((start, end))
        return out

    def _dense_grades(self, words: list[_Word]) -> dict[tuple[int, int], _Grade]:
        """Every candidate span's grade from its nearest codes; one model call for the whole chunk."""
        if self.dense is None:
            return {}
        spans = self._candidates(words)
        texts = [" ".join(word.text for word in words[start:end]) for start, end in spans]
        return {
            span: _Grade.of(ranking)
            for span, ranking in zip(spans, self.dense.rankings(texts, DENSE_DEPTH), strict=True)
        }

    def _dense_rejects(self, start: int, end: int, grades: dict[tuple[int, int], _Grade]) -> bool:
        grade = grades.get((start, end))
        if grade is None:
            return False
        if grade.diagnosis < DENSE_MIN:
            return True  # nothing diagnostic near it: a setting, a drug, a measurement
        if grade.own_other > grade.diagnosis + DENSE_MARGIN:
            return True  # itself a procedure, device, drug or status ("kidney transplant", "dialysis")
        return any(  # the site or object of a procedure or device named by the words around it
            outer.context_other > grade.diagnosis + DENSE_MARGIN
            for (outer_start, outer_end), outer in grades.items()
            if outer_start <= start and end <= outer_end and (outer_start, outer_end) != (start, end)
        )

    def _chunk_spans(self, words: list[_Word]) -> list[_Span]:
        """Longest condition spans first, without overlap; of equal length, the one nearest a diagnosis first."""
        found: list[_Span] = []
        taken = [False] * len(words)
        grades = self._dense_grades(words)
        for length in range(min(self.max_span, len(words)), 0, -1):
            starts = list(range(0, len(words) - length + 1))
            if grades:
                starts.sort(key=lambda start: -_diagnosis_of(grades, start, start + length))
            for start in starts:
                end = start + length
                if any(taken[start:end]):
                    continue
                span = self._condition(words[start:end])
                if span is None or self._dense_rejects(start, end, grades):
                    continue
                span.start, span.end = start, end
                found.append(span)
                for position in range(start, end):
                    taken[position] = True
        merged: list[_Span] = []
        for span in sorted(found, key=lambda span: span.start):
            if merged and merged[-1].end == span.start:
                # one noun phrase the vocabulary names in two pieces ("chronic hepatitis c" + "infection")
                last = merged[-1]
                merged[-1] = _Span(last.start, span.end, [*last.tokens, *span.tokens], last.finding and span.finding)
            else:
                merged.append(span)
        return merged

    def typed_codes(self, description: str) -> tuple[list[str], str]:
        """The names of the ICD-10-CM codes typed in ``description`` ("I50.9" -> "Heart failure, unspecified"),
        and the description with every code-shaped token cut out (a code is not a word of a condition).
        A code the vocabulary does not know gives no term (``workflow.start`` reports it)."""
        names: list[str] = []
        for token in codes_in_text(description):
            code = self._code_of_key.get(code_key(token) or "")
            if code is not None and self.grounding.index.names.get(code):
                names.append(self.grounding.index.names[code])
                description = re.sub(rf"(?<![\w.]){re.escape(token)}(?!\w)", " , ", description, count=1)
        return names, description

    def __call__(self, description: str) -> list[str]:
        code_terms, description = self.typed_codes(description)
        return list(dict.fromkeys([*code_terms, *self._conditions(description)]))

    def _conditions(self, description: str) -> list[str]:
        text = normalise(description)
        if not text:
            return []
        chunks = [chunk.strip() for chunk in CHUNK_BREAK.split(f" {text} ") if chunk and chunk.strip()]
        terms: list[_Term] = []
        pending_modifiers: list[str] = []  # "type 1" or "stage 3" waiting for the condition after "or"
        pregnancy = False
        for chunk in chunks:
            modifiers = [f"{m.group(1)} {m.group(2)}" for m in NUMBERED_MODIFIER.finditer(chunk)]
            words = _words(chunk)
            spans = self._chunk_spans(words)
            if not spans:
                numbers = [word.text for word in words if word.role == "number"]
                if modifiers and len(_span_tokens(words)) <= 2:
                    # a bare "type 1" before "or type 2 diabetes", or "(stage 3)" after its condition
                    if terms and not pending_modifiers and _attaches_after(terms[-1].text, modifiers):
                        terms[-1].text = f"{terms[-1].text} {' '.join(modifiers)}"
                    else:
                        pending_modifiers.extend(modifiers)
                elif terms and words and all(word.role in ("modifier", "stop", "connector") for word in words):
                    severity = " ".join(word.text for word in words if word.role == "modifier")
                    if severity:
                        terms[-1].text = f"{terms[-1].text} {severity}"  # "major depressive disorder, recurrent"
                elif terms and numbers and len(numbers) == len([w for w in words if w.role != "stop"]):
                    # "stage 3 or 4": the 4 takes the previous term's numbered modifier
                    for number in numbers:
                        other = NUMBERED_MODIFIER.sub(lambda m, n=number: f"{m.group(1)} {n}", terms[-1].text, 1)
                        if other != terms[-1].text:
                            terms.append(_Term(other, terms[-1].tokens, terms[-1].finding))
                continue
            pregnancy = pregnancy or any(
                word.token in PREGNANCY_WORDS and not _negated(words, _Span(position, position + 1, [], False))
                for position, word in enumerate(words)
            )
            for span in spans:
                if set(span.tokens) <= PREGNANCY_CONTEXT and set(span.tokens) & PREGNANCY_WORDS:
                    continue  # when, not what: "pregnancy", "second trimester of pregnancy"
                if _negated(words, span):
                    continue  # "without diabetes", "no prior stroke": an exclusion, not the population
                term = _with_modifiers(words, span)
                for modifier in pending_modifiers:
                    keyword = modifier.split()[0]
                    swapped = re.sub(rf"\b{keyword} \w+", modifier, term, count=1)
                    terms.append(_Term(swapped if swapped != term else f"{modifier} {term}", span.tokens, span.finding))
                pending_modifiers = []
                terms.append(_Term(term, span.tokens, span.finding))
        if pregnancy:
            for found in terms:
                if set(found.tokens) & PREGNANCY_WORDS or "gestational" in found.tokens:
                    continue  # already says so
                if any(code.startswith("O") for code in self._codes_with_all([*found.tokens, "pregnancy"])):
                    found.text = f"{found.text} in pregnancy"
                    found.finding = False
        diseases = [term.text for term in terms if not term.finding]
        kept = diseases if diseases else [term.text for term in terms]
        out: list[str] = []
        for text in kept:
            if text not in out:
                out.append(text)
        return out

    def _codes_with_all(self, tokens: list[str]) -> list[str]:
        return [self.grounding.index.codes[row] for row in self.grounding.rows_with_all(tokens)]


@dataclass
class _Term:
    text: str
    tokens: list[str]
    finding: bool


NEGATIONS = frozenset({"without", "no", "not", "excluding", "except", "free", "non"})


def _negated(words: list[_Word], span: _Span) -> bool:
    """A negation word before the span with nothing but function words between them."""
    for word in reversed(words[: span.start]):
        if word.text in NEGATIONS:
            return True
        if word.role in ("content", "modifier"):
            return False
    return False


def _attaches_after(term: str, modifiers: list[str]) -> bool:
    """A trailing "(stage 3)" qualifies the condition just named unless it already carries a stage."""
    return all(modifier.split()[0] not in term.split() for modifier in modifiers)


def _with_modifiers(words: list[_Word], span: _Span) -> str:
    """The span's words plus adjacent severity words and numbered modifiers ("stage 4", "type 2")."""
    start, end = span.start, span.end
    while start > 0:
        before = words[start - 1]
        if before.role == "modifier":
            start -= 1
        elif (
            before.role == "number"
            and start > 1
            and NUMBERED_MODIFIER.fullmatch(f"{words[start - 2].text} {before.text}")
        ):
            start -= 2
        elif before.text == "to" and start > 1 and words[start - 2].role == "modifier":
            start -= 1  # "moderate to severe"
        else:
            break
    if end < len(words) and words[end - 1].text in ("stage", "type", "class", "grade") and words[end].role == "number":
        end += 1  # the span ended on "stage": keep its number
    elif end < len(words) - 1 and NUMBERED_MODIFIER.fullmatch(f"{words[end].text} {words[end + 1].text}"):
        end += 2
    return " ".join(word.text for word in words[start:end]).strip(" ,.-")


def offline_decompose(
    description: str, con: duckdb.DuckDBPyConnection | None = None, dense: DenseRetriever | None = None
) -> list[str]:
    """Clinical terms named by ``description``, in order, deduplicated (opens the vocabulary if no ``con``)."""
    return offline_decomposer(con, dense=dense)(description)


def offline_decomposer(
    con: duckdb.DuckDBPyConnection | None = None, dense: DenseRetriever | None = None
) -> Callable[[str], list[str]]:
    """The offline decomposer in the same ``str -> list[str]`` shape as the Claude one; with a ready
    dense index its spans are also graded by their nearest codes (see the module docstring)."""
    return GroundedDecomposer(get_grounding(con if con is not None else connect()), dense=dense)
