"""What every retriever does before it searches: tokenise, and refuse bad queries with a reason."""

from __future__ import annotations

import re
import sys
import unicodedata

MAX_QUERY_CHARS = 500

_TOKEN = re.compile(r"[a-z0-9]+")
_TYPED_WORD = re.compile(r"[A-Za-z0-9]+")
_SQL = re.compile(
    r"\bselect\s+(\*|distinct\b|count\s*\(|\w+\s*,\s*\w+)[\s\S]*\bfrom\b"
    r"|\bselect\b[\s\S]*\bfrom\b[\s\S]*\bwhere\b|\binsert\s+into\b|\bdelete\s+from\b|\bdrop\s+(table|database|view)\b"
    r"|\bunion\s+(all\s+)?select\b|\bupdate\s+\w+\s+set\b|\b(alter|create|truncate)\s+table\b"
    r"|;\s*--|'\s*or\s+'?\w+'?\s*=\s*'?\w",
    re.IGNORECASE,
)
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "in",
        "into",
        "is",
        "it",
        "its",
        "nos",
        "of",
        "on",
        "or",
        "other",
        "the",
        "to",
        "with",
        "without",
    ]  # noqa: E501
)


def fold(text: str) -> str:
    """Lower case with accents folded, so 'Sézary' and 'Sezary' are one word."""
    if text.isascii():  # nothing to fold (NFKD leaves ASCII as is): the BM25 build tokenises ~98k texts
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).lower()


def tokenize(text: str) -> list[str]:
    """Word tokens of ``text`` (stop words dropped): the same for documents and queries.

    Interned: callers cache the words of ~100k vocabulary texts (the set builders' features), and
    one shared string per distinct word keeps that a few MB instead of half a million copies.
    """
    return [sys.intern(token) for token in _TOKEN.findall(fold(text)) if token not in STOPWORDS]


def abbreviations_typed(text: str) -> set[str]:
    """Tokens ``text`` writes with two or more capital letters ("CHF", "HFrEF", "T2DM"), lower-cased as
    ``tokenize`` gives them: abbreviations as the user typed them, which no spelling fix may turn into
    another word ("ARDS" is not a misspelt "rads").

    >>> sorted(abbreviations_typed("adults with CHF or HFrEF, not Asthma"))
    ['chf', 'hfref']
    """
    return {word.lower() for word in _TYPED_WORD.findall(text) if sum(ch.isupper() for ch in word) >= 2}


def query_problem(query: object) -> str | None:
    """Why ``query`` cannot be searched, or None when it can."""
    if not isinstance(query, str):
        return "the query must be text"
    if not "".join(ch for ch in query if ch.isspace() or unicodedata.category(ch) != "Cc").strip():
        # only spaces or control characters (a NUL byte, say): nothing a person typed is left
        return "the query is empty (spaces or control characters only): type a condition, e.g. 'heart failure'"
    if len(query) > MAX_QUERY_CHARS:
        return f"the query is {len(query):,} characters long; keep it under {MAX_QUERY_CHARS}"
    if _SQL.search(query):
        return "the query looks like SQL or code, not a clinical description"
    if not tokenize(query):
        return "the query has no searchable English words (ICD-10-CM text is English)"
    return None
