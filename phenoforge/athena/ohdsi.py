"""Fetch OHDSI Phenotype Library cohorts into a phenoforge cohort library.

The library's repository keeps one Circe definition per cohort (``inst/cohorts/<id>.json``) and an
index with the names (``inst/Cohorts.csv``). They are read at a pinned release tag, over HTTP or
from a local copy (a clone of the repository, or the installed R package, whose ``inst/`` contents
sit at the package root), and written in the same library format as the bundled libraries, so the
benchmark, decomposition and dashboard use them unchanged.

Display names: Cohorts.csv names carry status tags in brackets (``[P][R] Heart failure``:
P = pending peer review, R = a referent concept cohort, D = deprecated, W = withdrawn). The tags are
stripped from the display name, which is also the query the benchmark feeds the retrievers; the
original name is kept in the manifest report.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phenoforge.config import ProgressCallback, libraries_dir, no_progress
from phenoforge.engine.circe import parse_cohort
from phenoforge.engine.curated import (
    Citation,
    CohortEntry,
    LibraryManifest,
    LibraryStats,
    cohort_file_name,
    write_library,
)
from phenoforge.errors import LibraryError
from phenoforge.libraries.common import libraries_lock
from phenoforge.libraries.destination import check_library_target

if TYPE_CHECKING:  # imported where a request is made: `python -m phenoforge` starts without httpx
    import httpx

PINNED_TAG = "v3.37.0"
REPOSITORY = "OHDSI/PhenotypeLibrary"
RAW_URL = "https://raw.githubusercontent.com/{repository}/{tag}/{path}"
TREE_URL = "https://github.com/{repository}/tree/{tag}"
LICENCE = "Apache License 2.0"
LIBRARY_DIR_NAME = "ohdsi"

DEFAULT_COHORT_IDS: tuple[str, ...] = (
    "503",
    "40",
    "288",
    "499",
    "611",
    "619",
    "647",
    "687",
    "510",
    "513",
    "519",
    "507",
    "521",
    "594",
    "602",
    "457",
    "549",
    "524",
    "463",
    "775",
    "626",
    "558",
    "563",
)
"""The 23 cohorts of the reference's decomposition test cases."""

_STATUS_TAGS = re.compile(r"^\s*(?:\[[^\]]*\]\s*)+")
_COHORT_ID = re.compile(r"^\d+$")
HTTP_TIMEOUT = 30.0


class _Missing(Exception):
    """A file the source does not have (HTTP 404, or absent from the local copy)."""


def display_name(cohort_name: str, long_name: str | None = None, cohort_id: str = "") -> str:
    """``[P][R] Heart failure`` -> ``Heart failure``; falls back on the long name, then the id."""
    name = _STATUS_TAGS.sub("", cohort_name or "").strip()
    if not name and long_name:
        name = _STATUS_TAGS.sub("", long_name).strip()
    return name or f"OHDSI cohort {cohort_id}"


def normalise_cohort_id(raw: str | int) -> str:
    """``40``, ``"40"``, ``" 40 "`` and ``"40.0"`` -> ``"40"``; ValueError for anything else."""
    text = str(raw).strip()
    if re.fullmatch(r"\d+\.0+", text):
        text = text.split(".", 1)[0]
    if not _COHORT_ID.match(text):
        raise ValueError(f"{raw!r} is not an OHDSI cohort id (a whole number)")
    return str(int(text))


class _HttpSource:
    """Raw files of the repository at one tag."""

    def __init__(self, client: httpx.Client, tag: str, repository: str = REPOSITORY) -> None:
        self.client = client
        self.tag = tag
        self.repository = repository
        self.index_path = "inst/Cohorts.csv"
        self.label = TREE_URL.format(repository=repository, tag=tag)

    def url(self, path: str) -> str:
        return RAW_URL.format(repository=self.repository, tag=self.tag, path=path)

    def read(self, path: str) -> str:
        import httpx

        url = self.url(path)
        try:
            response = self.client.get(url)
        except httpx.HTTPError as error:
            raise LibraryError(f"{url}: request failed ({type(error).__name__}: {error})") from None
        if response.status_code == 404:
            raise _Missing(f"{url}: not found (HTTP 404) at tag {self.tag}")
        if response.status_code != 200:
            raise LibraryError(f"{url}: HTTP {response.status_code}")
        return response.text

    def cohort_path(self, cohort_id: str) -> str:
        return f"inst/cohorts/{cohort_id}.json"

    def version(self) -> str:
        return self.tag


def _child(folder: Path, name: str) -> Path | None:
    """``folder/name`` matched case-insensitively (Cohorts.csv vs cohorts.csv)."""
    if not folder.is_dir():
        return None
    exact = folder / name
    if exact.exists():
        return exact
    return next((p for p in sorted(folder.iterdir()) if p.name.lower() == name.lower()), None)


class _LocalSource:
    """A local copy: a repository clone, an installed R package, or its ``cohorts`` folder."""

    def __init__(self, root: Path) -> None:
        root = Path(root).expanduser()
        if not root.is_dir():
            raise LibraryError(
                f"{root}: not a directory; pass a clone of {REPOSITORY} or the "
                "installed PhenotypeLibrary R package folder"
            )
        layouts = (
            (root / "inst", "clone of the repository"),
            (root, "installed R package"),
            (root.parent, "installed R package (its cohorts folder)"),
        )
        for base, kind in layouts:
            index = _child(base, "Cohorts.csv")
            cohorts = _child(base, "cohorts")
            if index is not None and index.is_file() and cohorts is not None and cohorts.is_dir():
                if kind.endswith("(its cohorts folder)") and cohorts.resolve() != root.resolve():
                    continue
                self.root = root
                self.base = base
                self.index_file = index
                self.cohorts_dir = cohorts
                self.label = f"{root} ({kind})"
                self.index_path = str(index)
                return
        raise LibraryError(
            f"{root}: no Cohorts.csv beside a cohorts/ folder; pass a clone of {REPOSITORY} "
            "(with inst/Cohorts.csv and inst/cohorts/), the installed R package folder "
            "(Cohorts.csv and cohorts/), or that package's cohorts/ folder"
        )

    def read(self, path: str) -> str:
        file = Path(path)
        try:
            return file.read_text(encoding="utf-8-sig")
        except FileNotFoundError:
            raise _Missing(f"{file}: not in the local copy") from None
        except (OSError, UnicodeDecodeError) as error:
            raise LibraryError(f"{file}: cannot be read ({error})") from None

    def cohort_path(self, cohort_id: str) -> str:
        return str(self.cohorts_dir / f"{cohort_id}.json")

    def version(self) -> str:
        """The R package's version from DESCRIPTION, when the copy has one."""
        for folder in (self.root, self.base, self.base.parent):
            description = _child(folder, "DESCRIPTION")
            if description is not None and description.is_file():
                match = re.search(r"^Version:\s*(\S+)", description.read_text(errors="replace"), re.MULTILINE)
                if match:
                    return match.group(1)
        return "local copy (version unknown)"


def parse_cohorts_index(text: str, where: str) -> dict[str, dict[str, str]]:
    """Cohorts.csv rows by cohort id; LibraryError when the id or name column is missing."""
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    fields = {name.strip().lower(): name for name in reader.fieldnames or []}
    if "cohortid" not in fields or "cohortname" not in fields:
        raise LibraryError(
            f"{where}: expected the Phenotype Library's Cohorts.csv with cohortId and cohortName "
            f"columns, found {', '.join(reader.fieldnames or []) or 'no header'}"
        )
    rows: dict[str, dict[str, str]] = {}
    for row in reader:
        clean = {key.strip().lower(): (value or "").strip() for key, value in row.items() if key is not None}
        try:
            cohort_id = normalise_cohort_id(clean["cohortid"])
        except ValueError:
            continue
        rows[cohort_id] = clean
    if not rows:
        raise LibraryError(f"{where}: lists no cohorts")
    return rows


def _listed_concepts(definition: dict[str, Any]) -> set[tuple[str, int | str]]:
    found: set[tuple[str, int | str]] = set()
    for concept_set in parse_cohort(definition).concept_sets.values():
        for item in concept_set.items:
            found.add((item.vocabulary_id, item.concept_id if item.concept_id is not None else item.code or ""))
    return found


def _check_definition(definition: Any) -> None:
    """ValueError saying what a cohort file lacks for resolution (parse, entry sets)."""
    cohort = parse_cohort(definition)
    if not cohort.roles.inclusion:
        raise ValueError("no concept set is referenced by PrimaryCriteria")


def fetch_ohdsi_library(
    dest: Path | None = None,
    ids: Iterable[str | int] | None = None,
    all_: bool = False,
    from_dir: Path | None = None,
    client: httpx.Client | None = None,
    release_tag: str = PINNED_TAG,
    progress: ProgressCallback | None = None,
    overwrite: bool = False,
) -> LibraryManifest:
    """Write the OHDSI library (default ``<data>/libraries/ohdsi``) and return its manifest.

    Cohorts come from ``from_dir`` when given, else over HTTP from the repository at
    ``release_tag``. ``ids`` picks cohorts, ``all_`` takes every cohort in Cohorts.csv, neither the
    23 default cohorts. A cohort that cannot be fetched or parsed is reported in
    ``manifest.report['failures']``; when none succeeds nothing is written (LibraryError). The
    library is written atomically, so a failure never leaves a half-written one. An existing folder is
    replaced only with ``overwrite`` and only when it holds a library phenoforge wrote; a library id
    another installed library has is refused.
    """
    progress = progress or no_progress
    dest = Path(dest) if dest is not None else libraries_dir() / LIBRARY_DIR_NAME
    check_library_target(dest, overwrite, own_dir=LIBRARY_DIR_NAME)  # before any download
    own_client = client is None and from_dir is None
    if own_client:
        import httpx

        client = httpx.Client(timeout=HTTP_TIMEOUT, follow_redirects=True)
    try:
        if from_dir is not None:
            source: _HttpSource | _LocalSource = _LocalSource(Path(from_dir))
        else:
            assert client is not None
            source = _HttpSource(client, release_tag)
        return _fetch(source, dest, ids, all_, release_tag, progress, overwrite)
    finally:
        if own_client and client is not None:
            client.close()


def _requested_ids(
    ids: Iterable[str | int] | None,
    all_: bool,
    index: dict[str, dict[str, str]],
    failures: dict[str, str],
) -> list[str]:
    if all_:
        return sorted(index, key=int)
    requested: list[str] = []
    for raw in ids if ids is not None else DEFAULT_COHORT_IDS:
        try:
            cohort_id = normalise_cohort_id(raw)
        except ValueError as error:
            failures[str(raw)] = str(error)
            continue
        if cohort_id not in requested:
            requested.append(cohort_id)
    return requested


def _fetch(
    source: _HttpSource | _LocalSource,
    dest: Path,
    ids: Iterable[str | int] | None,
    all_: bool,
    release_tag: str,
    progress: ProgressCallback,
    overwrite: bool,
) -> LibraryManifest:
    try:
        index = parse_cohorts_index(source.read(source.index_path), source.index_path)
    except _Missing as missing:
        raise LibraryError(f"{missing}; is this the Phenotype Library?") from None
    failures: dict[str, str] = {}
    requested = _requested_ids(ids, all_, index, failures)
    entries: list[CohortEntry] = []
    definitions: dict[str, dict[str, Any]] = {}
    names: dict[str, str] = {}
    listed: set[tuple[str, int | str]] = set()
    for position, cohort_id in enumerate(requested):
        progress(position, len(requested), f"OHDSI cohort {cohort_id}")
        row = index.get(cohort_id)
        if row is None:
            failures[cohort_id] = f"not listed in Cohorts.csv ({source.label})"
            continue
        path = source.cohort_path(cohort_id)
        try:
            definition = json.loads(source.read(path))
            _check_definition(definition)
        except _Missing as missing:
            failures[cohort_id] = str(missing)
            continue
        except LibraryError as error:
            failures[cohort_id] = str(error)
            continue
        except json.JSONDecodeError as error:
            failures[cohort_id] = f"{path}: not valid JSON ({error})"
            continue
        except ValueError as error:
            failures[cohort_id] = f"{path}: not a usable Circe cohort definition ({error})"
            continue
        names[cohort_id] = row.get("cohortname", "")
        entries.append(
            CohortEntry(
                cohort_id=cohort_id,
                cohort_name=display_name(row.get("cohortname", ""), row.get("cohortnamelong"), cohort_id),
                file=cohort_file_name(cohort_id),
                description=row.get("logicdescription") or None,
            )
        )
        definitions[cohort_id] = definition
        listed |= _listed_concepts(definition)
    progress(len(requested), len(requested), "writing the OHDSI library")
    if not entries:
        detail = (
            "; ".join(f"{cohort_id}: {reason}" for cohort_id, reason in list(failures.items())[:5])
            or "no cohort was requested"
        )
        raise LibraryError(
            f"no OHDSI cohort could be fetched from {source.label} ({detail}); nothing was written to {dest}"
        )
    version = source.version()
    vocabularies: dict[str, int] = {}
    for vocabulary, _concept in listed:
        vocabularies[vocabulary] = vocabularies.get(vocabulary, 0) + 1
    manifest = LibraryManifest(
        library_id=f"ohdsi-phenotype-library-{version.lstrip('v')}"
        if version[:1].isdigit() or version.startswith("v")
        else "ohdsi-phenotype-library-local",
        name="OHDSI Phenotype Library",
        description=(
            f"{len(entries)} cohort definitions from the OHDSI Phenotype Library ({version}). "
            "Concept sets are OMOP standard concepts (mostly SNOMED), resolved to ICD-10-CM "
            "through the loaded Athena vocabulary's ICD10CM 'Maps to' edges."
        ),
        citation=Citation(
            source="OHDSI Phenotype Library",
            version=version,
            licence=LICENCE,
            url=TREE_URL.format(repository=REPOSITORY, tag=release_tag) if isinstance(source, _HttpSource) else None,
        ),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        vocabulary="OMOP",
        stats=LibraryStats(n_cohorts=len(entries), n_listed_codes=len(listed)),
        cohorts=entries,
        report={
            "source": source.label,
            "release": version,
            "requested": requested,
            "fetched": [entry.cohort_id for entry in entries],
            "failures": failures,
            "original_names": names,
            "listed_concepts_by_vocabulary": dict(sorted(vocabularies.items())),
            "name_rule": "display name = Cohorts.csv cohortName without its leading [..] status tags",
            "vocabulary_check": "concept ids are checked against the loaded Athena vocabulary "
            "when a cohort is resolved: absent ids are reported there as "
            "unresolvable (version drift)",
        },
    )
    with libraries_lock(libraries_dir()):
        check_library_target(dest, overwrite, manifest.library_id, own_dir=LIBRARY_DIR_NAME, id_option=False)
        write_library(dest, manifest, definitions, replace=overwrite)
    return manifest


def _ids_argument(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [part for value in values for part in re.split(r"[,\s]+", value) if part]


def _cmd_fetch(args: argparse.Namespace) -> int:
    from phenoforge.console import progress_bar

    with progress_bar(not args.quiet) as progress:
        manifest = fetch_ohdsi_library(
            dest=args.dest,
            ids=_ids_argument(args.ids),
            all_=args.all,
            from_dir=args.from_dir,
            release_tag=args.tag,
            progress=progress,
            overwrite=args.force,
        )
    dest = args.dest or libraries_dir() / LIBRARY_DIR_NAME
    if args.json:
        print(manifest.model_dump_json(indent=1))
        return 0
    failures = manifest.report.get("failures", {})
    print(
        f"wrote {manifest.library_id} to {dest}: {manifest.stats.n_cohorts} cohorts, "
        f"{manifest.stats.n_listed_codes} listed concepts, from {manifest.report['source']}"
    )
    for cohort_id, reason in failures.items():
        print(f"  failed {cohort_id}: {reason}", file=sys.stderr)
    return 0


def register_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``library fetch-ohdsi`` to the ``library`` command's subparsers."""
    fetch = subparsers.add_parser(
        "fetch-ohdsi",
        help="fetch OHDSI Phenotype Library cohorts into the 'ohdsi' library",
        description=f"Write the OHDSI library from {REPOSITORY} at a pinned tag ({PINNED_TAG}) "
        "over HTTP, or from a local copy. Default: the 23 cohorts of the decomposition cases. "
        "Resolving them to ICD-10-CM needs an Athena vocabulary (`build --athena DIR`).",
    )
    choice = fetch.add_mutually_exclusive_group()
    choice.add_argument("--ids", nargs="+", metavar="ID", help="cohort ids (space- or comma-separated)")
    choice.add_argument("--all", action="store_true", help="every cohort in Cohorts.csv")
    fetch.add_argument(
        "--from",
        dest="from_dir",
        type=Path,
        metavar="DIR",
        help="a local clone of the repository, or the installed R package folder",
    )
    fetch.add_argument("--tag", default=PINNED_TAG, help=f"release tag (default {PINNED_TAG})")
    fetch.add_argument("--dest", type=Path, help="library directory (default: <data>/libraries/ohdsi)")
    fetch.add_argument(
        "--force",
        action="store_true",
        help="replace the library at the destination: only a library phenoforge wrote there, never a folder "
        "of other files, the data directory or the libraries folder",
    )
    fetch.add_argument("--json", action="store_true", help="print the manifest as JSON")
    fetch.add_argument("--quiet", action="store_true", help="no progress bar")
    fetch.set_defaults(func=_cmd_fetch)
