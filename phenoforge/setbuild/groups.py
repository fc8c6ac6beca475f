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


def is_development_library(manifest: LibraryManifest | dict[str, Any]) -> bool:
    """The bundled Elixhauser 2026.1 and CMS-HCC libraries: what builders are designed and tuned on.

    Everything else (the Quan libraries, a user's import, OHDSI) is only ever scored.
    """
    raw = manifest if isinstance(manifest, dict) else manifest.model_dump()
    library_id = str(raw.get("library_id", "")).lower()
    return library_id.startswith(("elixhauser-2026", "cms-hcc-v24", "cms-hcc-v28"))
