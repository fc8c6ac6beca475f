"""Signed-off code lists: every save is a new, immutable version, and nothing of an earlier one changes.

A list lives in ``data/versions/<list_id>/``, one file per version, ``v0001.json``, ``v0002.json``, ... A
version is written to a temporary sibling (``storage.temporary_sibling``), flushed to disk, made read-only
and then *linked* to its name: ``os.link`` fails when the name exists, so a version file is created once and
never replaced, not even by a second writer that raced past the lock. A process killed between the
temporary write and the link leaves only the temporary (the next save removes it) and no version; one killed
after the link leaves the whole version. Each file carries the SHA-256 of its content (a damaged file is
reported on reading) and an ed25519 signature by the reviewer's key, which lives outside the data folder
(:mod:`phenoforge.lists.signing`): every read verifies it, and a version that does not verify is shown as
unsigned or badly signed, never as signed off. A version file is a record of the list and number its path
names: a regular file (not a link, device or pipe) of at most ``MAX_VERSION_BYTES``, whose content names that
same list and number.

Two reviewers saving the same list at once each get a version, numbered in the order they were written (a
file lock orders them); a reviewer who worked from an older version than the latest is told which version
was saved meanwhile. An edit of a signed-off version is a new version ``based_on`` it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, PrivateAttr, ValidationError

import phenoforge.lists.signing as signing
from phenoforge.config import versions_dir
from phenoforge.console import printable, typed_text_problem
from phenoforge.errors import PhenoforgeError
from phenoforge.lists.signing import SignatureCheck
from phenoforge.locks import file_lock
from phenoforge.storage import disk_full_error, is_disk_full, remove_stale_temporaries, temporary_sibling

if TYPE_CHECKING:
    import duckdb

    from phenoforge.engine.expansion import Hierarchy

VERSION_FORMAT = 2
"""The format of a version file this phenoforge writes (2: signed with the reviewer's ed25519 key)."""
READABLE_FORMATS = (1, 2)
"""Formats read: a format-1 version (before signatures) reads as unsigned."""
MAX_VERSION_BYTES = 32 * 1024 * 1024
"""The largest version file read (a list of every ICD-10-CM code with long reasons is a few MB)."""

CodeDecision = Literal["curated", "accept", "added", "reject", "removed"]
"""curated: taken from a curated cohort (no gate); accept: accepted at the review gate; added: added by hand
in an edit; reject: rejected at the gate; removed: taken out by hand in an edit (the last two are kept apart
from the list's codes, in ``excluded``)."""

LIST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
"""Matched whole (``fullmatch``): a name with a trailing newline is no list's name."""
_VERSION_FILE = re.compile(r"v(?P<number>[0-9]{4,})\.json")
"""Matched whole: ASCII digits only, and no more than the four a version number is written with below 10,000."""
MAX_TEXT = 2000


class VersionError(PhenoforgeError):
    """A version cannot be saved or read as asked (the message says why and what to do)."""


class VersionCode(BaseModel):
    """One code of a version, with where it came from, what was decided and why."""

    code: str
    name: str = Field(default="", description="the code's title in the vocabulary the version was saved with")
    provenance: str = Field(default="", description="'<library>/<cohort>', '<retriever> rank <r> for <term>', ...")
    decision: CodeDecision
    reason: str = ""
    decided_by: str = ""
    decided_at: str = ""


class VersionDraft(BaseModel):
    """What a reviewer signs off: everything of a version but its number, time and digest."""

    list_id: str
    reviewer: str
    description: str = Field(description="the population the list describes")
    note: str = Field(default="", description="what this version changes, in the reviewer's words")
    method: str = Field(description="how the list was made: the assembly's decomposer, generator, libraries, ...")
    session_id: str | None = None
    based_on: int | None = Field(
        default=None, description="the latest version the reviewer saw (None: the list had none, or not known)"
    )
    vocabulary_release: str
    vocabulary_build_id: str
    vocabulary_source: str = ""
    codes: list[VersionCode]
    excluded: list[VersionCode] = Field(default_factory=list, description="rejected or removed codes, with why")
    notes: list[str] = Field(default_factory=list, description="unmappable terms and other remarks of the source")


class ListVersion(VersionDraft):
    """A signed-off version: immutable once written."""

    format: int = VERSION_FORMAT
    number: int
    saved_at: str
    public_key: str = Field(default="", description="the public half of the reviewer's key (base64, ed25519)")
    signature: str = Field(default="", description="ed25519 signature of the content but digest and signature")
    digest: str = ""
    _signature_check: SignatureCheck = PrivateAttr(default=signing.UNCHECKED)

    @property
    def ref(self) -> str:
        return f"{self.list_id}@{self.number}"

    @property
    def signature_check(self) -> SignatureCheck:
        """What the signature said when this version was read or saved (never taken from the file itself)."""
        return self._signature_check

    @property
    def signed_off(self) -> bool:
        """Whether the signature verified with the reviewer's key on this computer."""
        return self._signature_check.verified

    @property
    def code_list(self) -> list[str]:
        return [entry.code for entry in self.codes]


class SaveResult(BaseModel):
    version: ListVersion
    path: Path
    notes: list[str] = Field(default_factory=list, description="e.g. another reviewer's version saved meanwhile")


class VersionSummary(BaseModel):
    list_id: str
    number: int
    reviewer: str
    saved_at: str
    n_codes: int
    note: str
    description: str
    based_on: int | None
    vocabulary_release: str
    signature: SignatureCheck = signing.UNCHECKED


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _root(root: Path | None) -> Path:
    return Path(root) if root is not None else versions_dir()


def check_list_id(list_id: str) -> str:
    """``list_id`` if it can name a folder (letters, digits, '.', '_', '-', at most 80); else a VersionError."""
    text = str(list_id).strip()
    if not LIST_ID.fullmatch(text) or text in {".", ".."}:
        raise VersionError(
            f"{list_id!r} cannot name a list: use letters, digits, '.', '_' or '-' (at most 80, starting with a "
            "letter or digit), e.g. heart-failure-adults"
        )
    return text


def check_text(text: str, field: str, multiline: bool = False) -> str:
    """``text`` when a person may store it as ``field`` (:func:`phenoforge.console.typed_text_problem`: no
    control characters, no undecodable bytes, a line break only where ``multiline``); a ``VersionError`` else."""
    problem = typed_text_problem(str(text), field, multiline)
    if problem is not None:
        raise VersionError(problem)
    return str(text)


def check_reviewer(reviewer: str) -> str:
    """The reviewer's name with blanks collapsed; a name of only spaces (or with control characters) refused."""
    from phenoforge.eval.runs import clean_name

    # NFKC, zero-width and other format characters dropped, blanks collapsed
    name = clean_name(check_text(str(reviewer).strip(" \t"), "reviewer name"))
    if not name:
        raise VersionError("the reviewer name is empty (only spaces): type your name to sign off the version")
    if len(name) > 200:
        raise VersionError("the reviewer name is longer than 200 characters: shorten it")
    return name


def _canonical(payload: dict[str, object], leave_out: tuple[str, ...]) -> bytes:
    body = {key: value for key, value in payload.items() if key not in leave_out}
    return json.dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8")


def _digest(payload: dict[str, object]) -> str:
    return hashlib.sha256(_canonical(payload, ("digest",))).hexdigest()


def _signed_content(payload: dict[str, object]) -> bytes:
    """What the signature signs: every field but the digest and the signature (the public key included)."""
    return _canonical(payload, ("digest", "signature"))


def _check_draft_text(draft: VersionDraft) -> None:
    """Every text a person typed into the draft, by the one rule (a description and reasons may hold lines)."""
    check_text(draft.description, "description", multiline=True)
    check_text(draft.note, "note")
    for entry in [*draft.codes, *draft.excluded]:
        check_text(entry.reason, f"reason of {entry.code}", multiline=True)
        check_text(entry.decided_by, f"reviewer of {entry.code}")


def version_path(list_id: str, number: int, root: Path | None = None) -> Path:
    return _root(root) / list_id / f"v{number:04d}.json"


def _numbers(folder: Path) -> list[int]:
    try:
        names = [child.name for child in folder.iterdir()]
    except FileNotFoundError:
        return []
    return sorted(
        int(match["number"])
        for name in names
        if (match := _VERSION_FILE.fullmatch(name)) and name == f"v{int(match['number']):04d}.json"
    )


def version_numbers(list_id: str, root: Path | None = None) -> list[int]:
    """The version numbers of a list, oldest first ([] for a list with none)."""
    return _numbers(_root(root) / check_list_id(list_id))


def list_ids(root: Path | None = None) -> list[str]:
    """Every list with at least one version, by name."""
    base = _root(root)
    try:
        folders = sorted(child for child in base.iterdir() if child.is_dir() and LIST_ID.fullmatch(child.name))
    except FileNotFoundError:
        return []
    return [folder.name for folder in folders if _numbers(folder)]


def _same_description(first: str, second: str) -> bool:
    return " ".join(first.casefold().split()) == " ".join(second.casefold().split())


def save_version(
    draft: VersionDraft,
    root: Path | None = None,
    seen: int | None = None,
    other_description: bool = False,
) -> SaveResult:
    """Sign ``draft`` off as the list's next version; earlier versions are never touched.

    Refused (``VersionError``): a reviewer name of only spaces, text with control characters, a list name that
    cannot name a folder, a list of no codes, ``based_on`` naming a version the list does not have, and (unless
    ``other_description``) a draft describing another population than the list's latest version. Two savers at
    once each get their own number; the one whose latest seen version (``seen``, default ``based_on``) is not
    the latest hears which version was saved meanwhile.
    """
    list_id = check_list_id(draft.list_id)
    reviewer = check_reviewer(draft.reviewer)
    _check_draft_text(draft)
    seen = draft.based_on if seen is None else seen
    if not draft.codes:
        raise VersionError("the list has no codes: there is nothing to sign off (accept or add codes first)")
    codes = [code.code for code in draft.codes]
    if len(set(codes)) != len(codes):
        repeated = sorted({code for code in codes if codes.count(code) > 1})
        raise VersionError(f"codes listed twice: {', '.join(repeated)}")
    if len(draft.note) > MAX_TEXT:
        raise VersionError(f"the note is longer than {MAX_TEXT} characters: shorten it")
    folder = _root(root) / list_id
    notes: list[str] = []
    try:
        key = signing.signing_key(reviewer)  # made on the reviewer's first sign-off, outside the data folder
    except signing.SigningError as error:
        raise VersionError(f"cannot sign the version off: {error}") from None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with file_lock(_root(root) / f".{list_id}.lock"):
            remove_stale_temporaries(folder)
            existing = _numbers(folder)
            latest = existing[-1] if existing else None
            if draft.based_on is not None and draft.based_on not in existing:
                has = _ranges(existing) if existing else "no version yet"
                raise VersionError(f"{list_id} has no version {draft.based_on} to base yours on: it has {has}")
            if latest is not None and not other_description:
                latest_path = folder / f"v{latest:04d}.json"
                other_text = _peek(latest_path)[2]
                if not other_text:  # unreadable or damaged: its description is not known, so say that
                    raise VersionError(
                        f"{list_id}'s latest version ({latest}) cannot be read, so what the list describes is not "
                        f"known: `python -m phenoforge version list` names the problem; restore {latest_path} "
                        "from a backup, or save under another list name (`--into-existing` saves here anyway)"
                    )
                if not _same_description(other_text, draft.description):
                    raise VersionError(
                        f"{list_id} is a list of {printable(other_text[:80])!r}; yours describes "
                        f"{printable(draft.description[:80])!r}: save it under another list name, or say that it "
                        "belongs to this list (`--into-existing`, or the page's checkbox)"
                    )
            if latest is not None and seen != latest:
                other = _peek(folder / f"v{latest:04d}.json")
                worked = f"version {seen}" if seen is not None else "no version of it"
                notes.append(
                    f"{list_id} had version {latest} (saved by {printable(other[0]) or 'someone'} at "
                    f"{printable(other[1]) or '?'}) while you worked from {worked}: yours is a new version, and "
                    f"version {latest} is kept as it is; compare them (`python -m phenoforge version diff "
                    f"{list_id}@{latest} {list_id}@{latest + 1}`)"
                )
            number = (latest or 0) + 1
            while True:
                version = ListVersion(
                    **{
                        **draft.model_dump(include=set(VersionDraft.model_fields)),
                        "list_id": list_id,
                        "reviewer": reviewer,
                    },
                    number=number,
                    saved_at=now_iso(),
                    public_key=signing.public_key_of(key),
                )
                payload = version.model_dump(mode="json")
                payload["signature"] = version.signature = signing.sign(_signed_content(payload), key)[0]
                payload["digest"] = version.digest = _digest(payload)
                version._signature_check = signing.VERIFIED
                path = folder / f"v{number:04d}.json"
                if _publish(path, json.dumps(payload, indent=2, ensure_ascii=False).encode("utf-8")):
                    break
                number += 1  # a writer outside the lock took the number: never replace its file
                notes.append(f"version {number - 1} appeared while saving: yours is version {number}")
    except OSError as error:
        if is_disk_full(error):
            raise disk_full_error(f"version of {list_id}", folder, "every earlier version is kept") from None
        raise VersionError(f"cannot save a version of {list_id} under {folder} ({error.strerror or error})") from None
    return SaveResult(version=version, path=path, notes=notes)


def _publish(path: Path, data: bytes) -> bool:
    """Write ``data`` to a temporary sibling, flush it, make it read-only and link it to ``path``; False (and
    nothing written) when ``path`` exists: a version file is created once and never replaced."""
    tmp = temporary_sibling(path)
    try:
        with open(tmp, "xb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o444)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        _fsync_folder(path.parent)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a folder be opened for fsync
        handle = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def _peek(path: Path) -> tuple[str, str, str]:
    """(reviewer, saved at, description) of a version file as it reads, unverified; blanks when unreadable."""
    try:
        payload = json.loads(read_record(path))
        return str(payload.get("reviewer", "")), str(payload.get("saved_at", "")), str(payload.get("description", ""))
    except (VersionError, ValueError, AttributeError, RecursionError):
        return "", "", ""


def read_record(path: Path, limit: int = MAX_VERSION_BYTES) -> str:
    """The text of a version file: a regular file reached without following a link (a device, a pipe, a link
    to another list's file is refused before it is read), of at most ``limit`` bytes, in UTF-8."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a pipe opens without a writer
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise VersionError(f"{path} is a symbolic link, not a version file phenoforge wrote") from None
        raise VersionError(f"{path} cannot be read ({error.strerror or error})") from None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise VersionError(f"{path} is not a regular file (a device, pipe or socket), not a version file")
        if info.st_size > limit:
            raise VersionError(f"{path} is {info.st_size:,} bytes, more than a version file holds ({limit:,})")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(handle, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise VersionError(f"{path} grew past {limit:,} bytes while it was read")
    except OSError as error:
        raise VersionError(f"{path} cannot be read ({error.strerror or error})") from None
    finally:
        os.close(handle)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise VersionError(f"{path} is not UTF-8 text, not a version file") from None


def load_version(list_id: str, number: int | None = None, root: Path | None = None) -> ListVersion:
    """One version (the latest when ``number`` is None), checked against the digest it was signed off with."""
    list_id = check_list_id(list_id)
    numbers = version_numbers(list_id, root)
    if not numbers:
        known = list_ids(root)
        raise VersionError(
            f"no list named {list_id!r} has a saved version"
            + (f"; saved lists: {', '.join(known[:10])}" if known else "; save one from the Assemble page first")
        )
    if number is None:
        number = numbers[-1]
    if number not in numbers:
        raise VersionError(f"{list_id} has no version {number}: it has {_ranges(numbers)}")
    path = version_path(list_id, number, root)
    try:
        payload = json.loads(read_record(path))
    except VersionError as error:
        raise VersionError(f"version {number} of {list_id} cannot be read: {error}") from None
    except (ValueError, RecursionError) as error:  # RecursionError: brackets nested past what json reads
        raise VersionError(f"version {number} of {list_id} cannot be read ({path}: {error})") from None
    if not isinstance(payload, dict) or payload.get("format") not in READABLE_FORMATS:
        found = payload.get("format") if isinstance(payload, dict) else None
        raise VersionError(
            f"version {number} of {list_id} is in format {printable(found)}, this phenoforge reads "
            f"{', '.join(map(str, READABLE_FORMATS))}"
        )
    if payload.get("list_id") != list_id or payload.get("number") != number:
        raise VersionError(
            f"{path} holds version {printable(payload.get('number'))} of list {printable(payload.get('list_id'))!r}, "
            f"not version {number} of {list_id}: a file copied or linked in from elsewhere is not read as this list's"
        )
    if payload.get("digest") != _digest(payload):
        raise VersionError(
            f"version {number} of {list_id} was changed on disk after it was signed off ({path} no longer matches "
            "its digest): it is not shown as the signed-off version; restore the file from a backup"
        )
    try:
        version = ListVersion.model_validate(payload)
    except ValidationError as error:
        problem = error.errors()[0]["msg"]
        raise VersionError(f"version {number} of {list_id} is not a version file ({problem})") from None
    version._signature_check = signing.verify(
        _signed_content(payload), version.reviewer, version.signature, version.public_key
    )
    return version


def _ranges(numbers: list[int]) -> str:
    return f"versions {numbers[0]}-{numbers[-1]}" if len(numbers) > 1 else f"version {numbers[0]} only"


def list_versions(list_id: str, root: Path | None = None, problems: list[str] | None = None) -> list[VersionSummary]:
    """Every version of a list, oldest first. An unreadable version raises, unless ``problems`` is given: then
    each is named there and skipped, and the others are listed (one damaged file hides none of them)."""
    out = []
    for number in version_numbers(list_id, root):
        try:
            version = load_version(list_id, number, root)
        except VersionError as error:
            if problems is None:
                raise
            problems.append(str(error))
            continue
        out.append(
            VersionSummary(
                list_id=version.list_id,
                number=version.number,
                reviewer=version.reviewer,
                saved_at=version.saved_at,
                n_codes=len(version.codes),
                note=version.note,
                description=version.description,
                based_on=version.based_on,
                vocabulary_release=version.vocabulary_release,
                signature=version.signature_check,
            )
        )
    return out


def latest_readable(list_id: str, root: Path | None = None, problems: list[str] | None = None) -> ListVersion | None:
    """The list's latest version that reads; each newer one that does not is named in ``problems``."""
    for number in reversed(version_numbers(list_id, root)):
        try:
            return load_version(list_id, number, root)
        except VersionError as error:
            if problems is None:
                raise
            problems.append(str(error))
    return None


def parse_ref(ref: str) -> tuple[str, int | None]:
    """``LIST@N`` -> (LIST, N); ``LIST`` -> (LIST, None: the latest)."""
    list_id, at, number = str(ref).strip().partition("@")
    if not at:
        return check_list_id(list_id), None
    if not (number.isascii() and number.isdigit()) or int(number) < 1:
        raise VersionError(f"{ref!r}: the version after '@' is a number from 1 (e.g. {list_id or 'my-list'}@2)")
    return check_list_id(list_id), int(number)


def load_ref(ref: str, root: Path | None = None) -> ListVersion:
    return load_version(*parse_ref(ref), root=root)


# --- the vocabulary a version is reopened with ----------------------------------------------------------


class VocabularyCheck(BaseModel):
    """How a version's codes read in the vocabulary now open."""

    same_build: bool
    saved_release: str
    current_release: str
    missing: list[str] = Field(default_factory=list, description="codes the current vocabulary no longer has")
    renamed: list[tuple[str, str, str]] = Field(default_factory=list, description="(code, title then, title now)")
    not_billable: list[str] = Field(default_factory=list, description="codes that are not billable now")

    @property
    def changed(self) -> bool:
        return bool(self.missing or self.renamed or self.not_billable)

    def messages(self) -> list[str]:
        out = []
        if not self.same_build:
            out.append(
                f"the vocabulary was rebuilt since this version was saved (then {self.saved_release}, now "
                f"{self.current_release})" + ("" if self.changed else ": every code still exists with the same title")
            )
        if self.missing:
            out.append(f"no longer in the vocabulary ({len(self.missing)}): {', '.join(self.missing)}")
        out += [f"{code} changed title: '{then}' -> '{now}'" for code, then, now in self.renamed]
        if self.not_billable:
            out.append(f"not billable in this vocabulary: {', '.join(self.not_billable)}")
        return out


def vocabulary_identity(con: duckdb.DuckDBPyConnection) -> tuple[str, str, str]:
    """(release, build id, source) of the open vocabulary."""
    from phenoforge.engine.db import read_metadata

    metadata = read_metadata(con)
    return (
        metadata.get("vocabulary_release", "") or "unknown",
        metadata.get("build_id", ""),
        metadata.get("source", ""),
    )


def check_vocabulary(version: ListVersion, con: duckdb.DuckDBPyConnection) -> VocabularyCheck:
    """Which of the version's codes the open vocabulary no longer has, which changed title, which are not
    billable (the version itself is never changed: this is what a reviewer reopening it needs to see)."""
    from phenoforge.engine.expansion import get_hierarchy

    release, build, _source = vocabulary_identity(con)
    hierarchy = get_hierarchy(con)
    check = VocabularyCheck(
        same_build=build == version.vocabulary_build_id,
        saved_release=version.vocabulary_release,
        current_release=release,
    )
    for entry in version.codes:
        node = hierarchy.resolve(entry.code)
        if node is None:
            check.missing.append(entry.code)
            continue
        now = hierarchy.name[node]
        if entry.name and now != entry.name:
            check.renamed.append((entry.code, entry.name, now))
        if not hierarchy.billable.get(node, False):
            check.not_billable.append(entry.code)
    return check


# --- an edit of a signed-off version is a new version ---------------------------------------------------


def amend(
    base: ListVersion,
    con: duckdb.DuckDBPyConnection,
    reviewer: str,
    note: str,
    add: Iterable[str] = (),
    remove: Iterable[str] = (),
    root: Path | None = None,
    seen: int | None = None,
) -> SaveResult:
    """``base`` with codes added and removed, signed off as the list's next version (``base`` is unchanged).

    An added code must exist in the open vocabulary (its title is taken from there); a removed one must be in
    ``base``. The note says why; it is each changed code's reason. ``seen`` is the latest version the editor saw
    (default: ``base``): a version saved after it is named in the result's notes, as for any save."""
    from phenoforge.engine.expansion import get_hierarchy

    reviewer = check_reviewer(reviewer)
    note = " ".join(check_text(str(note), "note").split())
    if not note:
        raise VersionError("say what the edit changes (the note is each changed code's reason)")
    hierarchy = get_hierarchy(con)
    current = {entry.code: entry for entry in base.codes}
    at = now_iso()
    removed: list[VersionCode] = []
    missing = []
    for raw in dict.fromkeys(code.strip() for code in remove if code.strip()):
        found = current.get(raw) or current.get(_display(hierarchy, raw))
        if found is None:
            missing.append(raw)
            continue
        del current[found.code]
        removed.append(
            found.model_copy(update={"decision": "removed", "reason": note, "decided_by": reviewer, "decided_at": at})
        )
    if missing:
        raise VersionError(f"not in {base.ref}, so not removed: {', '.join(missing)}")
    unknown, added = [], []
    for raw in dict.fromkeys(code.strip() for code in add if code.strip()):
        node = hierarchy.resolve(raw)
        if node is None:
            unknown.append(raw)
            continue
        code = hierarchy.code[node]
        if code in current:
            continue
        current[code] = VersionCode(
            code=code,
            name=hierarchy.name[node],
            provenance=f"added by hand to {base.ref}",
            decision="added",
            reason=note,
            decided_by=reviewer,
            decided_at=at,
        )
        added.append(code)
    if unknown:
        raise VersionError(f"not in the vocabulary, so not added: {', '.join(unknown)}")
    if not removed and not added:
        raise VersionError(f"nothing changes: every code to add is already in {base.ref} and none is removed")
    release, build, source = vocabulary_identity(con)
    draft = VersionDraft(
        **{
            **base.model_dump(include=set(VersionDraft.model_fields)),
            "reviewer": reviewer,
            "note": note,
            "method": f"edit of version {base.number}: {len(added)} added, {len(removed)} removed",
            "based_on": base.number,
            "vocabulary_release": release,
            "vocabulary_build_id": build,
            "vocabulary_source": source,
            "codes": list(current.values()),
            "excluded": [*base.excluded, *removed],
        }
    )
    result = save_version(draft, root, seen=base.number if seen is None else seen)
    gone = [code for code in check_vocabulary(base, con).missing if code in current]
    if gone:  # kept as signed off: dropping them is the reviewer's call, made with --remove
        result.notes.append(f"kept, though this vocabulary no longer has them: {', '.join(gone)}")
    return result


def _display(hierarchy: Hierarchy, raw: str) -> str:
    """A code as the vocabulary writes it ('e1122' -> 'E11.22'); ``raw`` itself when unknown."""
    node = hierarchy.resolve(raw)
    return hierarchy.code[node] if node is not None else raw


# --- two versions side by side ---------------------------------------------------------------------------


class VersionDiff(BaseModel):
    first: str
    second: str
    added: list[VersionCode] = Field(default_factory=list, description="in the second only")
    removed: list[VersionCode] = Field(default_factory=list, description="in the first only")
    changed: list[tuple[str, str, str]] = Field(
        default_factory=list, description="(code, decision/provenance then, now) for codes in both"
    )
    kept: int = 0


def diff_versions(first: ListVersion, second: ListVersion) -> VersionDiff:
    """What the second version adds, removes and decides otherwise than the first."""
    before = {entry.code: entry for entry in first.codes}
    after = {entry.code: entry for entry in second.codes}
    out = VersionDiff(first=first.ref, second=second.ref)
    out.added = [entry for code, entry in after.items() if code not in before]
    out.removed = [entry for code, entry in before.items() if code not in after]
    for code in before.keys() & after.keys():
        then, now = before[code], after[code]
        if (then.decision, then.provenance) != (now.decision, now.provenance):
            out.changed.append((code, f"{then.decision}: {then.provenance}", f"{now.decision}: {now.provenance}"))
    out.changed.sort()
    out.kept = len(before.keys() & after.keys())
    return out
