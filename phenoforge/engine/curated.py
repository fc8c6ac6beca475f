"""Curated cohort libraries: the bundled ground truth, and how a cohort becomes a code list.

A library is a directory with a ``manifest.json`` and one Circe-shaped cohort definition per file,
so native ICD-10-CM libraries and OHDSI Phenotype Library cohorts share one format and one
resolution path. The curated set is a lower bound on the codes a cohort could use: a legitimately
missing sibling is why the metrics give partial credit rather than calling it a false positive.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Final, Literal

import duckdb
from pydantic import BaseModel, Field, ValidationError

from phenoforge.config import libraries_dir
from phenoforge.engine.circe import parse_cohort
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.engine.models import ConceptItem, Resolution, SkippedItem
from phenoforge.engine.schema import ICD10CM
from phenoforge.engine.standard_mapping import map_standard_items
from phenoforge.errors import DiskFullError, LibraryError
from phenoforge.storage import disk_full_error, is_disk_full, remove_stale_temporaries, temporary_sibling

MANIFEST = "manifest.json"
LIBRARY_MARKER = ".phenoforge-library.json"
"""Written by ``write_library`` beside the manifest: the proof that phenoforge wrote the folder."""
LIBRARY_FORMAT: Final = "phenoforge-library/1"


class LibraryMarker(BaseModel):
    """What makes a folder replaceable: the library's id, the format, and the digest of the manifest written."""

    format: Literal["phenoforge-library/1"]
    library_id: str
    manifest_sha256: str
    files_sha256: dict[str, str] = {}
    """each cohort file's digest as written (empty in markers written before it was recorded): ``--force``
    replaces a library only when every file is still as phenoforge wrote it"""


class Citation(BaseModel):
    source: str
    version: str
    licence: str
    url: str | None = None


class CohortEntry(BaseModel):
    cohort_id: str
    cohort_name: str
    file: str
    description: str | None = None


class LibraryStats(BaseModel):
    n_cohorts: int
    n_listed_codes: int
    n_codes_not_in_vocabulary: int = 0
    codes_not_in_vocabulary: list[str] = Field(default_factory=list)


class LibraryManifest(BaseModel):
    library_id: str
    name: str
    description: str
    citation: Citation
    created_at: str
    vocabulary: str = ICD10CM
    group: str | None = Field(
        default=None,
        description="libraries that are versions or recodings of one source share a group; "
        "leave-one-group-out evaluation holds a whole group out (default: the library id)",
    )
    stats: LibraryStats
    cohorts: list[CohortEntry]
    report: dict[str, Any] = Field(default_factory=dict)


def library_group(manifest: LibraryManifest) -> str:
    """The group a library is held out with: near-duplicates (CMS-HCC V24/V28) must leave together.

    Training on one member of a group and scoring another would leak the shared codes, so a
    library without a declared group is its own group.
    """
    return manifest.group or manifest.library_id


class Library:
    """An opened library: its manifest, and its cohort definitions read on demand."""

    def __init__(self, path: Path, manifest: LibraryManifest) -> None:
        self.path = path
        self.manifest = manifest
        self._by_id = {entry.cohort_id: entry for entry in manifest.cohorts}

    @property
    def library_id(self) -> str:
        return self.manifest.library_id

    @property
    def cohort_ids(self) -> list[str]:
        return [entry.cohort_id for entry in self.manifest.cohorts]

    def cohort(self, cohort_id: str) -> CohortEntry:
        try:
            return self._by_id[str(cohort_id)]
        except KeyError:
            raise LibraryError(f"cohort {cohort_id!r} is not in library {self.library_id!r} ({self.path})") from None

    def stamp(self, manifest_text: str | None = None) -> str:
        """A digest of what the library holds: its manifest (``manifest_text`` in its place when given) and every
        cohort file's bytes, so a cohort file edited in place (same ids, names and counts) changes it too."""
        digest = hashlib.sha1((self.manifest.model_dump_json() if manifest_text is None else manifest_text).encode())
        for entry in self.manifest.cohorts:
            try:
                digest.update((self.path / entry.file).read_bytes())
            except OSError:
                digest.update(b"\0unreadable")
        return digest.hexdigest()[:16]

    def definition(self, cohort_id: str) -> dict[str, Any]:
        file = self.path / self.cohort(cohort_id).file
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise LibraryError(f"{file}: cohort file is missing") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise LibraryError(f"{file}: not valid JSON ({error})") from None
        if not isinstance(data, dict):
            raise LibraryError(f"{file}: a cohort definition must be a JSON object")
        return data


def load_library(path: Path | str) -> Library:
    path = Path(path)
    manifest_file = path / MANIFEST
    try:
        raw = json.loads(manifest_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LibraryError(f"{manifest_file}: no library manifest here") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise LibraryError(f"{manifest_file}: not valid JSON ({error})") from None
    try:
        manifest = LibraryManifest.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in issue['loc'])}: {issue['msg']}" for issue in error.errors()[:5]
        )
        raise LibraryError(f"{manifest_file}: malformed manifest ({problems})") from None
    return Library(path, manifest)


def list_libraries(root: Path | None = None, errors: list[str] | None = None) -> list[Library]:
    """Every library below ``root`` (default: the data directory's libraries folder).

    A broken library, or a second library with an id already listed (ids resolve libraries, so a
    duplicate would be shadowed), raises LibraryError, unless ``errors`` is given: then its message
    is appended there and the others are still listed.
    """
    root = Path(root) if root is not None else libraries_dir()
    if not root.is_dir():
        return []
    loaded: list[Library] = []
    for child in sorted(root.iterdir()):
        if not child.is_dir() or child.name.startswith(".") or not (child / MANIFEST).is_file():
            continue
        try:
            loaded.append(load_library(child))
        except LibraryError as error:
            if errors is None:
                raise
            errors.append(str(error))
    # A bundled or fetched library keeps its id over a user import that took it; otherwise the first folder.
    owner: dict[str, Library] = {}
    for library in sorted(loaded, key=lambda lib: "imported_from" in lib.manifest.report.get("build", {})):
        owner.setdefault(library.library_id, library)
    libraries: list[Library] = []
    for library in loaded:
        first = owner[library.library_id]
        if first is library:
            libraries.append(library)
            continue
        message = (
            f"{library.path}: library id {library.library_id!r} is already used by {first.path}; "
            "this copy is skipped: re-import it with another --id"
        )
        if errors is None:
            raise LibraryError(message)
        errors.append(message)
    return libraries


def cohort_file_name(cohort_id: str) -> str:
    """A file name for a cohort id; ids that had to be changed get a hash so two never collide."""
    safe = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_") else "_" for ch in cohort_id)
    if safe != cohort_id or not safe:
        safe = f"{safe}-{hashlib.sha1(cohort_id.encode('utf-8')).hexdigest()[:10]}"
    return f"cohorts/{safe}.json"


def _foreign_content(folder: Path, adopt_unmarked: bool) -> str | None:
    """Why ``folder`` is not a library phenoforge wrote (None when it is): its marker must name the
    manifest's id and digest, and it may hold nothing but the manifest and the cohort files it lists.
    ``adopt_unmarked`` accepts a library written before markers existed (bundled rebuilds only)."""
    manifest_file = folder / MANIFEST
    try:
        manifest_bytes = manifest_file.read_bytes()
        manifest = LibraryManifest.model_validate_json(manifest_bytes)
    except (OSError, ValidationError):
        return f"holds files but no phenoforge library ({MANIFEST} is missing or not a library manifest)"
    try:
        marker: LibraryMarker | None = LibraryMarker.model_validate_json((folder / LIBRARY_MARKER).read_bytes())
    except FileNotFoundError:
        marker = None
    except (OSError, ValidationError):
        return f"has a {LIBRARY_MARKER} phenoforge did not write"
    if marker is None and not adopt_unmarked:
        return (
            f"has no {LIBRARY_MARKER}, so phenoforge cannot tell it wrote this folder (a library written by an "
            "older phenoforge: remove it yourself if it may go)"
        )
    if marker is not None and (
        marker.library_id != manifest.library_id or marker.manifest_sha256 != hashlib.sha256(manifest_bytes).hexdigest()
    ):
        return f"has a {MANIFEST} that is not the one phenoforge wrote there (edited, or a forged {LIBRARY_MARKER})"
    if marker is not None and not adopt_unmarked:
        changed = []
        for entry in manifest.cohorts:
            written = marker.files_sha256.get(entry.file)
            try:
                now = hashlib.sha256((folder / entry.file).read_bytes()).hexdigest()
            except OSError:
                now = None
            if written is None or now != written:
                changed.append(entry.file)
        if changed:  # a marker of before the digests were recorded cannot prove the cohort files: not replaced
            shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            return f"has cohort files that are not as phenoforge wrote them (edited, removed or unproven: {shown})"
    expected = {MANIFEST, LIBRARY_MARKER, *(entry.file for entry in manifest.cohorts)}
    expected |= {str(Path(name).parent) for name in expected} - {"."}
    children = list(folder.rglob("*"))  # does not follow links into folders: a link is itself foreign
    foreign = sorted(
        {str(p.relative_to(folder)) for p in children if p.is_symlink() or str(p.relative_to(folder)) not in expected}
    )
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        return f"holds files phenoforge did not write ({shown})"
    return None


def check_replaceable(dest: Path, replace: bool, adopt_unmarked: bool = False) -> None:
    """Refuse to write ``dest`` unless it is missing, empty, or (with ``replace``) a library phenoforge wrote.

    A symbolic link is never replaced: renaming it would swap the link, not the folder it points to.
    """
    dest = Path(dest)
    if dest.is_symlink():
        raise LibraryError(f"{dest} is a symbolic link; a library is never written over one: give a real folder")
    if not dest.exists():
        return
    if not dest.is_dir():
        raise LibraryError(f"{dest} exists and is not a folder; nothing was touched: choose another --dest")
    try:
        empty = not any(dest.iterdir())
    except OSError as error:
        raise LibraryError(f"{dest} cannot be read ({error.strerror or error}); nothing was touched") from None
    if empty:
        return
    if not replace:
        raise LibraryError(f"{dest} already exists; choose another --dest or --id, or pass --force to replace it")
    problem = _foreign_content(dest, adopt_unmarked)
    if problem is not None:
        raise LibraryError(
            f"{dest} {problem}; --force replaces only a library phenoforge wrote, so nothing was touched: "
            "choose another --dest"
        )


def write_library(
    dest: Path,
    manifest: LibraryManifest,
    definitions: dict[str, dict[str, Any]],
    replace: bool = False,
    adopt_unmarked: bool = False,
) -> Path:
    """Write a whole library atomically: a temporary sibling directory, then a rename.

    An existing library at ``dest`` is replaced only with ``replace`` and only when phenoforge wrote it
    (``check_replaceable``); the new one carries the marker that proves it for the next replacement.
    """
    dest = Path(dest)
    listed = {entry.cohort_id for entry in manifest.cohorts}
    if listed != set(definitions):
        raise LibraryError(f"{dest}: manifest cohorts and definitions differ ({sorted(listed ^ set(definitions))[:5]})")
    files = [entry.file for entry in manifest.cohorts]
    if len(set(files)) != len(files):
        raise LibraryError(f"{dest}: two cohorts share one file name; give them distinct ids")
    check_replaceable(dest, replace, adopt_unmarked)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _write_error(dest, error) from None
    remove_stale_temporaries(dest.parent)  # what a killed import or build left behind
    tmp = temporary_sibling(dest, "tmp")
    old = temporary_sibling(dest, "old")
    try:
        try:
            (tmp / "cohorts").mkdir(parents=True)
            written: dict[str, str] = {}
            for entry in manifest.cohorts:
                (tmp / entry.file).parent.mkdir(parents=True, exist_ok=True)
                data = json.dumps(definitions[entry.cohort_id], indent=1).encode("utf-8")
                (tmp / entry.file).write_bytes(data)
                written[entry.file] = hashlib.sha256(data).hexdigest()
            manifest_bytes = manifest.model_dump_json(indent=1).encode("utf-8")
            (tmp / MANIFEST).write_bytes(manifest_bytes)
            marker = LibraryMarker(
                format=LIBRARY_FORMAT,
                library_id=manifest.library_id,
                manifest_sha256=hashlib.sha256(manifest_bytes).hexdigest(),
                files_sha256=written,
            )
            (tmp / LIBRARY_MARKER).write_text(marker.model_dump_json(indent=1), encoding="utf-8")
        except OSError as error:
            raise _write_error(dest, error) from None
        if dest.exists():
            os.replace(dest, old)
        try:
            os.replace(tmp, dest)
        except BaseException:
            if old.exists() and not dest.exists():
                os.replace(old, dest)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return dest


def _write_error(dest: Path, error: OSError) -> LibraryError | DiskFullError:
    kept = f"{dest} is kept as it was" if dest.exists() else "nothing was written"
    if is_disk_full(error):
        return disk_full_error("a cohort library", dest, kept)
    return LibraryError(f"cannot write the library {dest} ({error.strerror or error}); {kept}")


def icd_cohort_definition(cohort_name: str, codes: list[str], include_descendants: bool = False) -> dict[str, Any]:
    """A Circe cohort definition whose one entry concept set lists ICD-10-CM codes."""
    items = [
        {
            "concept": {
                "CONCEPT_ID": 0,
                "CONCEPT_CODE": code,
                "VOCABULARY_ID": ICD10CM,
                "CONCEPT_NAME": None,
            },
            "isExcluded": False,
            "includeDescendants": include_descendants,
        }
        for code in codes
    ]
    return {
        "name": cohort_name,
        "ConceptSets": [{"id": 0, "name": cohort_name, "expression": {"items": items}}],
        "PrimaryCriteria": {"CriteriaList": [{"ConditionOccurrence": {"CodesetId": 0}}]},
        "InclusionRules": [],
    }


class CuratedConceptSet(BaseModel):
    cohort_id: str
    cohort_name: str
    codes: list[str]
    unresolvable: list[str] = Field(default_factory=list)
    skipped: list[SkippedItem] = Field(default_factory=list)
    excluded_codes: list[str] = Field(
        default_factory=list, description="removed by isExcluded items or by exclusion concept sets"
    )
    other_concept_sets: list[str] = Field(
        default_factory=list, description="non-entry, non-exclusion sets: reported, not merged"
    )


def _resolve_icd_items(
    con: duckdb.DuckDBPyConnection, items: list[ConceptItem]
) -> tuple[set[int], set[int], list[str]]:
    hierarchy = get_hierarchy(con)
    included: set[int] = set()
    excluded: set[int] = set()
    unresolvable: list[str] = []
    for item in items:
        concept_id = hierarchy.resolve(item.code or "")
        if concept_id is None:
            unresolvable.append(item.code or f"concept {item.concept_id}")
            continue
        nodes = {concept_id}
        if item.include_descendants:
            nodes.update(hierarchy.descendants(concept_id))
        (excluded if item.is_excluded else included).update(nodes)
    return included, excluded, unresolvable


def resolve_curated_concepts(
    con: duckdb.DuckDBPyConnection, items: list[ConceptItem], fanout_threshold: int = 100
) -> Resolution:
    """Resolve one concept set's items to ICD-10-CM codes.

    ICD-10-CM items go through the ICD-10-CM tree (descendants when asked; excluded items, with
    their descendants when flagged, removed). Items in other vocabularies are mapped through the
    loaded Athena tables; a standard concept that more than ``fanout_threshold`` ICD-10-CM codes
    map to is a broad grouper, reported and skipped rather than flooding the set.
    """
    hierarchy = get_hierarchy(con)
    icd_items = [item for item in items if item.vocabulary_id == ICD10CM]
    other_items = [item for item in items if item.vocabulary_id != ICD10CM]
    included, excluded, unresolvable = _resolve_icd_items(con, icd_items)
    codes = {hierarchy.code[node] for node in included - excluded}
    excluded_codes = {hierarchy.code[node] for node in excluded}
    skipped: list[SkippedItem] = []
    if other_items:
        mapped = map_standard_items(con, other_items, fanout_threshold)
        codes |= set(mapped.codes)
        codes -= excluded_codes
        excluded_codes |= set(mapped.excluded_codes)
        unresolvable += mapped.unresolvable
        skipped += mapped.skipped
    order = {code: hierarchy.id_by_key.get(code.replace(".", ""), 0) for code in codes}
    return Resolution(
        codes=sorted(codes, key=lambda code: (order[code], code)),
        unresolvable=unresolvable,
        skipped=skipped,
        excluded_codes=sorted(excluded_codes),
    )


def load_curated_concept_set(
    con: duckdb.DuckDBPyConnection,
    library_dir: Path | str | Library,
    cohort_id: str,
    fanout_threshold: int = 100,
) -> CuratedConceptSet:
    """The curated ICD-10-CM code list of one cohort: its ground truth in the benchmark.

    Entry-event concept sets form the inclusion set; exclusion sets (zero-occurrence rules) are
    subtracted; other sets are named in ``other_concept_sets`` and never merged in. Pass an opened
    :class:`Library` when loading many cohorts: a path re-reads the manifest each call.
    """
    library = library_dir if isinstance(library_dir, Library) else load_library(library_dir)
    entry = library.cohort(cohort_id)
    definition = library.definition(cohort_id)
    try:
        cohort = parse_cohort(definition)
    except ValueError as error:
        raise LibraryError(f"{library.path / entry.file}: {error}") from None
    if not cohort.roles.inclusion:
        raise LibraryError(f"{library.path / entry.file}: no concept set is referenced by PrimaryCriteria")
    include = Resolution()
    for set_id in cohort.roles.inclusion:
        part = resolve_curated_concepts(con, cohort.concept_sets[set_id].items, fanout_threshold)
        include.codes += part.codes
        include.unresolvable += part.unresolvable
        include.skipped += part.skipped
        include.excluded_codes += part.excluded_codes
    exclude_codes: set[str] = set()
    for set_id in cohort.roles.exclusion:
        part = resolve_curated_concepts(con, cohort.concept_sets[set_id].items, fanout_threshold)
        exclude_codes |= set(part.codes)
        include.skipped += part.skipped
    codes = list(dict.fromkeys(code for code in include.codes if code not in exclude_codes))
    return CuratedConceptSet(
        cohort_id=entry.cohort_id,
        cohort_name=entry.cohort_name,
        codes=codes,
        unresolvable=list(dict.fromkeys(include.unresolvable)),
        skipped=include.skipped,
        excluded_codes=sorted(set(include.excluded_codes) | (exclude_codes & set(include.codes))),
        other_concept_sets=[cohort.concept_sets[set_id].name for set_id in cohort.roles.other],
    )
