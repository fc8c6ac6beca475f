"""The scope of a curated cohort proposed for a term, and the order proposals are offered in.

A curated match is a *proposal*: the reviewer confirms it or replaces it. To decide well they need
its scope (how many codes, which ICD-10-CM chapters and categories it spans, how much of it lies in
the term's own categories) and how it differs from the other cohorts that matched. When several
match, the one whose scope fits the term best is offered first. The rule is general, read from the
cohort's name and its codes, never from a list of cohort names:

1. a name that says the condition is *complicated* ("Hypertension, complicated", "Diabetes with
   chronic complications") comes after one that does not: a term names the condition, and its
   complications are a narrower population with other chapters' codes ("complicated hypertension"
   holds pregnancy codes, O10-O16). A name that says "uncomplicated", "without ..." or "no
   complications" is the condition itself;
2. a name with content words the term does not have ("End-stage heart failure", "Hypertensive heart
   disease with heart failure") is a subtype or a neighbour, after the cohort named for the term alone;
3. then a cohort that passed the match rule before one offered only because its name names the term
   (``nodes.name_alternatives``; every matched cohort is offered, alternatives fill up to ``MAX_PROPOSALS``);
4. then the larger share of the cohort's codes inside the term's own categories (the ICD-10-CM
   categories of its best hits), then fewer chapters, then the retrieval overlap, then fewer codes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

import duckdb

from phenoforge.agent.state import CohortMatch
from phenoforge.agent.words import content_words
from phenoforge.engine.expansion import get_hierarchy

_COMPLICATED = re.compile(r"(?<!un)complicated\b|\bwith\b.*\bcomplications?\b|\bcomplications?\b")
_PLAIN = re.compile(r"\buncomplicated\b|\bwithout\b|\bno\s+complications?\b|\bnot?\s+complicated\b")
_PLAIN_CLAUSE = re.compile(r"\bwithout\b.*$|\buncomplicated\b|\bno\s+complications?\b")
_COMPLICATION_WORDS = frozenset({"complicated", "uncomplicated", "complication", "complications"})

OWN_HITS = 3
"""The term's own categories are those of its best few hits."""
MAX_PROPOSALS = 8


def name_marks(cohort_name: str) -> tuple[bool, bool]:
    """``(complicated, plain)``: whether the name says the condition is complicated, or that it is not."""
    name = cohort_name.lower()
    plain = bool(_PLAIN.search(name))
    return (not plain and bool(_COMPLICATED.search(name))), plain


def extra_words(term_words: set[str], cohort_name: str) -> list[str]:
    """Content words of the cohort name the term does not have, once its "without ..." clause and the
    words saying (un)complicated are set aside: what makes the cohort a subtype or a neighbour."""
    name = _PLAIN_CLAUSE.sub(" ", cohort_name.lower())
    words = content_words(name) - _COMPLICATION_WORDS
    return sorted(word for word in words if word not in term_words and not word.isdigit())


def _category(hierarchy, code: str) -> str:  # noqa: ANN001
    node = hierarchy.resolve(code)
    if node is None:
        return code[:3]
    category = hierarchy.ancestor_of_kind(node, "category")
    return hierarchy.code[category] if category is not None else code[:3]


def _chapter(hierarchy, code: str) -> str:  # noqa: ANN001
    node = hierarchy.resolve(code)
    chapter = hierarchy.ancestor_of_kind(node, "chapter") if node is not None else None
    return hierarchy.name[chapter] if chapter is not None else "outside the chapters"


def categories_summary(categories: Iterable[str], limit: int = 6) -> str:
    """``"E08, E09, E10, ... (7 categories)"``: the first few in code order."""
    ordered = sorted(set(categories))
    if not ordered:
        return "none"
    shown = ", ".join(ordered[:limit])
    return shown + (f", ... ({len(ordered)} categories)" if len(ordered) > limit else "")


def describe_scope(
    con: duckdb.DuckDBPyConnection,
    term: str,
    matches: list[CohortMatch],
    codes_of: dict[str, frozenset[str]],
    hit_codes: list[str],
) -> list[CohortMatch]:
    """``matches`` with their scope filled in and ranked best-fitting first (the module rule).

    ``codes_of`` maps ``library_id/cohort_id`` to the cohort's resolved codes.
    """
    hierarchy = get_hierarchy(con)
    own = {_category(hierarchy, code) for code in hit_codes[:OWN_HITS]}
    term_words = content_words(term)
    described: list[CohortMatch] = []
    for match in matches:
        codes = codes_of.get(f"{match.library_id}/{match.cohort_id}", frozenset())
        categories = Counter(_category(hierarchy, code) for code in codes)
        chapters = Counter(_chapter(hierarchy, code) for code in codes)
        complicated, plain = name_marks(match.cohort_name)
        inside = sum(count for category, count in categories.items() if category in own)
        described.append(
            match.model_copy(
                update={
                    "n_codes": len(codes),
                    "chapters": [name for name, _n in chapters.most_common()],
                    "categories": sorted(categories),
                    "own_categories": sorted(own),
                    "own_share": round(inside / len(codes), 4) if codes else 0.0,
                    "complicated": complicated,
                    "plain": plain,
                    "extra_words": extra_words(term_words, match.cohort_name),
                }
            )
        )
    described.sort(key=scope_key)
    room = max(MAX_PROPOSALS - sum(1 for match in described if match.matched), 0)
    alternatives = {match.key for match in described if not match.matched}
    kept_alternatives = {key for key in [m.key for m in described if not m.matched][:room]}
    ranked = [match for match in described if match.key not in alternatives or match.key in kept_alternatives]
    return [_with_difference(hierarchy, match, ranked, codes_of, rank) for rank, match in enumerate(ranked, 1)]


def scope_key(match: CohortMatch) -> tuple[int, int, int, float, int, float, int]:
    """Sort key: best-fitting scope first (see the module docstring)."""
    return (
        int(match.complicated),
        int(bool(match.extra_words)),
        int(not match.matched),
        -round(match.own_share, 1),
        len(match.chapters),
        -match.retrieval_overlap,
        match.n_codes,
    )


def _with_difference(
    hierarchy,  # noqa: ANN001
    match: CohortMatch,
    ranked: list[CohortMatch],
    codes_of: dict[str, frozenset[str]],
    rank: int,
) -> CohortMatch:
    key = f"{match.library_id}/{match.cohort_id}"
    mine = codes_of.get(key, frozenset())
    others: set[str] = set()
    for other in ranked:
        other_key = f"{other.library_id}/{other.cohort_id}"
        if other_key != key:
            others |= codes_of.get(other_key, frozenset())
    why: list[str] = []
    if match.complicated:
        why.append("its name says complicated: the condition's complications, not the condition")
    elif match.plain:
        why.append("its name says uncomplicated / without complications: the condition itself")
    if match.extra_words:
        why.append(f"its name adds {', '.join(match.extra_words)}: a subtype or neighbour of the term")
    if len(match.chapters) > 1:
        why.append(f"spans {len(match.chapters)} chapters")
    if not others:
        difference = "the only cohort that matched"
    else:
        only = mine - others
        missing = others - mine
        parts = []
        if only:
            parts.append(
                f"{len(only)} codes no other proposal has ("
                + categories_summary(_category(hierarchy, code) for code in only)
                + ")"
            )
        if missing:
            parts.append(f"lacks {len(missing)} codes the others hold")
        if not parts:
            parts.append("the same codes as the other proposals together")
        difference = "; ".join(parts)
    return match.model_copy(update={"rank": rank, "scope_note": "; ".join(why), "difference": difference})


_RANGE = re.compile(r"\(([A-Z0-9]{3}-[A-Z0-9]{3})\)\s*$")


def chapter_range(chapter_name: str) -> str:
    """ "Diseases of the circulatory system (I00-I99)" -> "I00-I99" (the name itself when it has no range)."""
    found = _RANGE.search(chapter_name)
    return found.group(1) if found else chapter_name


def scope_line(match: CohortMatch) -> str:
    """One line a reviewer reads: size, chapters, own share, how it differs from the others."""
    chapters = ", ".join(chapter_range(name) for name in match.chapters) or "none"
    own = ", ".join(match.own_categories) or "-"
    plural = "" if match.n_codes == 1 else "s"
    line = (
        f"{match.n_codes} code{plural} in {len(match.categories)} categor{'y' if len(match.categories) == 1 else 'ies'}"
        f" ({categories_summary(match.categories)}); chapters {chapters}; "
        f"{match.own_share:.0%} in the term's own categories ({own}); "
        f"vs the others: {match.difference}"
    )
    return line + (f"; {match.scope_note}" if match.scope_note else "")
