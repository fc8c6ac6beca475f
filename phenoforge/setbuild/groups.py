"""Library groups: near-duplicate libraries are held out together when a model is scored.

A manifest may declare ``group``; until every bundled manifest does, the CMS-HCC versions form one
group and the Elixhauser libraries another, and every other library is its own group.
"""

from __future__ import annotations

import re
from typing import Any

from phenoforge.engine.curated import LibraryManifest


def library_group(manifest: LibraryManifest | dict[str, Any]) -> str:
    """The group a library belongs to: its manifest's ``group`` when declared, else the fallback rule.

    A declared group is compared in one spelling (case folded, spaces and underscores as hyphens):
    a manifest declaring "CMS-HCC" or "cms_hcc" is the "cms-hcc" group, not a group of its own
    whose near-duplicates would then refuse (or, by a weaker check, inform) its builders.
    """
    raw = manifest if isinstance(manifest, dict) else manifest.model_dump()
    declared = raw.get("group") or (raw.get("report") or {}).get("group")
    if isinstance(declared, str) and declared.strip():
        return re.sub(r"[\s_]+", "-", declared.strip().casefold())
    library_id = str(raw.get("library_id", "")).lower()
    if library_id.startswith("cms-hcc"):
        return "cms-hcc"
    if "elixhauser" in library_id:
        return "elixhauser"
    return library_id


DEVELOPMENT_PREFIXES = ("elixhauser-2026", "cms-hcc-v24", "cms-hcc-v28")
TEST_PREFIXES = ("charlson-quan", "elixhauser-quan", "ahrq-ccs", "pediatric-ccc")
"""The bundled Quan libraries (``phenoforge.libraries.quan``), AHRQ CCS (``libraries.ccs``) and the pediatric
complex chronic conditions (``libraries.ccc``): training data for other groups' builders, only reported."""


def _library_id(manifest: LibraryManifest | dict[str, Any]) -> str:
    raw = manifest if isinstance(manifest, dict) else manifest.model_dump()
    return str(raw.get("library_id", "")).lower()


def is_development_library(manifest: LibraryManifest | dict[str, Any]) -> bool:
    """The bundled Elixhauser 2026.1 and CMS-HCC libraries: what builders are designed and tuned on.

    Their per-cohort results may be looked at while a builder is designed; the bundled test libraries'
    (:func:`is_test_library`) may not.
    """
    return _library_id(manifest).startswith(DEVELOPMENT_PREFIXES)


def is_test_library(manifest: LibraryManifest | dict[str, Any]) -> bool:
    """The bundled Quan Charlson and Quan Elixhauser: a test set for design decisions.

    They train the builders that score *other* groups (more cohorts to learn from), but no design
    choice is made by their own scores, and only their summary lines are read.
    """
    return _library_id(manifest).startswith(TEST_PREFIXES)


def is_training_library(manifest: LibraryManifest | dict[str, Any]) -> bool:
    """A bundled library the builders may be fitted on (always for groups other than its own).

    Every bundled library, development or test: leave-one-group-out keeps a cohort from being scored
    by anything fitted on its group. Anything else (a user's import, OHDSI) is only ever scored.
    """
    return is_development_library(manifest) or is_test_library(manifest)
