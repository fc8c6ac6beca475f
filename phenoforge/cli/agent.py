"""``python -m phenoforge assemble "..."`` and ``python -m phenoforge decompose-eval``.

``assemble`` walks the confirmation gate in the terminal: each generated candidate is shown with
its code, name, term, retriever, rank and hierarchy hint, and the reviewer answers a/r/e (accept,
reject, accept with descendants), A/R (accept/reject all remaining), s (skip), q (save and stop,
resume later with ``--resume``). ``--yes`` accepts and ``--no-input`` rejects every pending
candidate without prompting, for scripts. Every answer is recorded in the audit trail.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from phenoforge.agent.state import AssemblyState, Candidate, Decision
from phenoforge.errors import PhenoforgeError
from phenoforge.setbuild.builders import builder_names

ASSEMBLE_HELP = """Assemble a concept set from a population description: curated cohorts first, every generated code
through the review gate.

A curated cohort that matches a term is a proposal: its scope (size, chapters, how it differs from the other
matches) is printed, best-fitting first; press Enter to confirm it, a number to replace it, g to decline them all
for generated candidates. Parts of the description no ICD-10-CM code expresses (age, setting, treatment, time,
scores) are listed back: apply them in the cohort's other criteria. Nothing is written without --reviewer NAME
(or a name typed at the prompt); --yes/--no-input confirm each first proposal in that reviewer's name.

Each generated candidate is shown with its code, name, term, retriever, rank and hierarchy hint; answer
a (accept), r (reject), e (accept with descendants), A/R (accept/reject all remaining), s (skip) or
q (save and stop; resume later with --resume). --yes accepts and --no-input rejects every pending
candidate without prompting, for scripts. Every answer is recorded in the audit trail."""

PROMPT = "[a]ccept [r]eject [e]xpand+accept [A]ccept rest [R]eject rest [s]kip [q]uit: "
ANSWERS = {
    "a": "accept",
    "accept": "accept",
    "y": "accept",
    "yes": "accept",
    "r": "reject",
    "reject": "reject",
    "n": "reject",
    "no": "reject",
    "e": "expand",
    "expand": "expand",
    "s": "skip",
    "skip": "skip",
    "": "skip",
    "q": "quit",
    "quit": "quit",
    "A": "accept-rest",
    "R": "reject-rest",
}


def _connect():  # noqa: ANN202
    from phenoforge.engine.db import connect

    return connect()


def _dense(con, wanted: bool):  # noqa: ANN001, ANN202
    if not wanted:
        return None
    from phenoforge.engine.dense import load_dense_if_ready

    retriever = load_dense_if_ready(con)
    if retriever is None:
        from phenoforge.console import dense_unavailable_message
        from phenoforge.engine.dense import dense_index_status

        print(
            f"note: {dense_unavailable_message(dense_index_status(con), 'hybrid runs as BM25 alone')}", file=sys.stderr
        )
    return retriever


def _library_paths(names: list[str] | None) -> list[Path] | None:
    if not names:
        return None
    from phenoforge.libraries.resolve import resolve_library_dirs

    return resolve_library_dirs(names)


def describe_candidate(candidate: Candidate) -> str:
    sources = "; ".join(
        f"'{s.term}' {s.retriever} #{s.rank}" + (f" ({s.detail})" if s.detail else "") for s in candidate.sources
    )
    return f"{candidate.code:10} {candidate.name}\n           from {sources}\n           {candidate.hierarchy_hint}"


def print_terms(state: AssemblyState, out: TextIO) -> None:
    from phenoforge.agent.scope import scope_line

    print(f"session {state.session_id}: {state.description!r}", file=out)
    for note in state.notes:
        print(f"  note: {note}", file=out)
    for term in state.terms:
        if term.status == "curated" and term.curated:
            m = term.curated
            said = f"; {term.settled_by} {term.settlement}" if term.settled_by else ""
            print(f"  term '{term.term}': curated -> {m.key} {m.cohort_name}{said}", file=out)
        elif term.status == "proposed":
            count = len(term.proposals)
            print(f"  term '{term.term}': {count} curated cohorts proposed, best-fitting scope first:", file=out)
            for match in term.proposals:
                tag = "" if match.matched else " [named for the term]"
                print(f"    {match.rank}. {match.key} {match.cohort_name}{tag}", file=out)
                print(f"       {scope_line(match)}", file=out)
        elif term.status == "unmappable":
            print(f"  term '{term.term}': nothing found ({term.search_reason})", file=out)
        else:
            said = f" ({term.settled_by} {term.settlement})" if term.settled_by else ""
            print(
                f"  term '{term.term}': no curated cohort{said}; {len(term.candidate_codes)} generated candidates",
                file=out,
            )
    print_qualifiers(state.qualifiers, out)


def print_qualifiers(qualifiers: list, out: TextIO) -> None:  # noqa: ANN001 (list[Qualifier])
    if not qualifiers:
        return
    print("  not expressed by any ICD-10-CM code: apply these in the cohort's other criteria:", file=out)
    for qualifier in qualifiers:
        print(f"    - {qualifier.kind}: {qualifier.text}", file=out)


def settle_proposals(
    state: AssemblyState,
    con,  # noqa: ANN001
    reviewer: str,
    read: Callable[[str], str],
    out: TextIO,
    dense=None,  # noqa: ANN001
    app_state_path: Path | None = None,
    reason: str = "",
) -> tuple[AssemblyState, bool]:
    """For each term with curated proposals: Enter confirms the first, a number replaces it with another, g
    declines them all (generated candidates instead); ``(state, finished)``. Each answer is saved at once."""
    from phenoforge.agent import workflow

    for term in [t for t in state.terms if t.status == "proposed"]:
        count = len(term.proposals)
        first = term.proposals[0]
        print(f"\n'{term.term}': proposed {first.key} '{first.cohort_name}' (the others are listed above)", file=out)
        while True:
            try:
                raw = read(f"Enter confirms it, 1-{count} picks another, g: generated candidates instead, q stops: ")
            except EOFError:
                print("\nend of input: progress saved; resume with --resume " + state.session_id, file=out)
                return state, False
            text = raw.strip()
            if text.lower() in ("q", "quit"):
                print(f"saved; resume with --resume {state.session_id}", file=out)
                return state, False
            cohort: str | None
            if not text:
                cohort = first.key
            elif text.isdigit() and 1 <= int(text) <= count:
                cohort = term.proposals[int(text) - 1].key
            elif text.lower() in ("g", "generate", "generated"):
                cohort = None
            else:
                print(f"  {text!r} is not a choice; press Enter, type 1 to {count}, g or q", file=out)
                continue
            break
        state = workflow.settle(
            state, con, term.term, cohort, reviewer, reason=reason, dense=dense, app_state_path=app_state_path
        )
        settled = state.term_state(term.term)
        if settled is not None:
            print(f"  {settled.settlement}", file=out)
    return state, True


def review(
    state: AssemblyState,
    reviewer: str,
    read: Callable[[str], str],
    out: TextIO,
    app_state_path: Path | None = None,
    reason: str = "",
) -> tuple[AssemblyState, bool]:
    """Prompt for every pending candidate; ``(state, finished)``. Each answer is saved at once."""
    from phenoforge.agent import workflow

    pending = list(state.pending)
    for position, candidate in enumerate(pending, start=1):
        print(f"\n[{position}/{len(pending)}] {describe_candidate(candidate)}", file=out)
        while True:
            try:
                raw = read(PROMPT)
            except EOFError:
                print("\nend of input: progress saved; resume with --resume " + state.session_id, file=out)
                return state, False
            answer = ANSWERS.get(raw.strip()) or ANSWERS.get(raw.strip().lower())
            if answer is None:
                print(f"  {raw.strip()!r} is not an answer; type a, r, e, A, R, s or q", file=out)
                continue
            break
        if answer == "quit":
            print(f"saved; resume with --resume {state.session_id}", file=out)
            return state, False
        if answer == "skip":
            continue
        if answer in ("accept-rest", "reject-rest"):
            decision: Decision = "accept" if answer == "accept-rest" else "reject"
            rest = [(c.code, decision, False) for c in state.pending]
            return workflow.decide(state, rest, reviewer, app_state_path, reason=reason), True
        if answer == "expand" and candidate.n_descendants == 0:
            print("  no codes below this one: accepted as is", file=out)
        decision = "reject" if answer == "reject" else "accept"
        state = workflow.decide(
            state, [(candidate.code, decision, answer == "expand")], reviewer, app_state_path, reason=reason
        )
    return state, not state.pending


def check_output_path(flag: str, value: str | None, example: str = "concept_set.csv") -> None:
    """Refuse an output path that cannot be written before any work is done, in one line."""
    if not value:
        return
    path = Path(value)
    if path.is_dir():
        raise PhenoforgeError(f"{flag} {path} is a folder; give a file name, e.g. {path / example}")
    if not path.parent.is_dir():
        raise PhenoforgeError(f"{flag} {path}: the folder {path.parent} does not exist; create it or choose another")


def _write(path: Path, text: str, out: TextIO, again: str = "write it again with --resume") -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise PhenoforgeError(
            f"cannot write {path} ({error.strerror or error}); the session is saved: {again}"
        ) from None
    print(f"wrote {path}", file=out)


def _prompting_on(out: TextIO) -> Callable[[str], str]:
    """``input`` with its prompt written to ``out`` (stderr under ``--json``, so stdout stays JSON)."""

    def read(prompt: str) -> str:
        print(prompt, end="", file=out, flush=True)
        return input()

    return read


def _write_outputs(state: AssemblyState, con, args: argparse.Namespace, out: TextIO) -> None:  # noqa: ANN001
    from phenoforge.agent.export import concept_set_circe_json, concept_set_csv, concept_set_fhir_json

    assert state.concept_set is not None
    if args.csv:
        _write(Path(args.csv), concept_set_csv(state.concept_set), out)
    if args.circe:
        _write(Path(args.circe), concept_set_circe_json(con, state.concept_set), out)
    if args.fhir:
        if not state.concept_set.entries:
            print("note: the concept set is empty: no FHIR ValueSet written", file=out)
        else:
            _write(Path(args.fhir), concept_set_fhir_json(con, state.concept_set, state.session_id), out)


def cmd_assemble(args: argparse.Namespace) -> int:
    from phenoforge.agent import audit, workflow

    if args.list:
        for session in audit.list_sessions():
            print(
                f"{session.session_id}  {session.updated_at}  {session.stage:10} "
                f"{session.n_decisions:3} decisions  {workflow.printable(session.reviewer or '-'):10} "
                f"{workflow.printable(session.description)}"
            )
        return 0
    if args.audit:
        check_output_path("--csv", args.csv, "trail.csv")
        records = audit.decisions(args.audit)
        audit.saved_state(args.audit)  # unknown session -> readable error; a damaged one still has its trail
        if args.csv:  # the trail as CSV in that file (was: printed, and the file never written)
            said = sys.stderr if args.json else sys.stdout  # under --json, stdout holds the JSON alone
            _write(Path(args.csv), audit.audit_csv(records), said, again="write it again with --audit")
        if args.json or not args.csv:
            print(audit.audit_json(records) if args.json else audit.audit_csv(records), end="")
        return 0
    if args.yes and args.no_input:
        raise PhenoforgeError("--yes and --no-input contradict each other; pick one")
    check_output_path("--csv", args.csv)
    check_output_path("--circe", args.circe)
    check_output_path("--fhir", args.fhir, "value_set.json")
    if not args.resume:
        if not args.description:
            raise PhenoforgeError('give a description, e.g. assemble "adults with heart failure", or --resume ID')
        workflow.check_description(args.description)
    from phenoforge.agent.nodes import check_reason, check_reviewer

    reviewer = check_reviewer(args.reviewer) if args.reviewer is not None else ""  # "   " refused before any work
    check_reason(args.reason or "")  # control characters refused before any work, as in every typed field
    con = _connect()
    dense = None
    if args.circe:  # refused before any work: a file with this vocabulary's own ids would be other concepts
        from phenoforge.agent.export import circe_unavailable

        problem = circe_unavailable(con)
        if problem is not None:
            raise PhenoforgeError(f"--circe: {problem}")
    if args.resume:
        state = workflow.resume(args.resume)
    else:
        if not args.description:
            raise PhenoforgeError('give a description, e.g. assemble "adults with heart failure", or --resume ID')
        decompose_fn: Callable[[str], list[str]]
        dense = _dense(con, not args.no_dense)
        if args.decomposer == "claude":
            from phenoforge.agent.claude import default_decomposer

            decompose_fn = default_decomposer(model=args.model, timeout=args.timeout)
        else:
            from phenoforge.agent.offline import offline_decomposer

            decompose_fn = offline_decomposer(con, dense=dense)
        state = workflow.start(
            con,
            args.description,
            decompose_fn,
            reviewer=reviewer,
            decomposer_name=args.decomposer,
            library_paths=_library_paths(args.library),
            dense=dense,
            k=args.k,
            generator=args.generator,
        )
    # under --json, stdout holds the concept set's JSON alone: everything said to the reviewer goes to stderr
    out = sys.stderr if args.json else sys.stdout
    read = _prompting_on(out) if args.json else input
    print_terms(state, out)
    if not reviewer:
        if args.yes or args.no_input or not sys.stdin.isatty():
            raise PhenoforgeError(
                "a reviewer name is required: no list leaves Assemble without one; pass --reviewer NAME "
                f"(the session is saved: --resume {state.session_id} --reviewer NAME)"
            )
        reviewer = read("reviewer name: ")
    reviewer = check_reviewer(reviewer)
    state = workflow.with_reviewer(state, reviewer)
    if dense is None and any(term.status == "proposed" for term in state.terms) and not (args.yes or args.no_input):
        dense = _dense(con, not args.no_dense)  # a declined proposal's term is searched with it
    if args.yes or args.no_input:
        flag = "--yes" if args.yes else "--no-input"
        for term in [t for t in state.terms if t.status == "proposed"]:
            said = f"no prompt ({flag})" + (f": {args.reason}" if args.reason else "")
            state = workflow.settle(state, con, term.term, term.proposals[0].key, reviewer, reason=said)
            print(f"{reviewer} confirmed {term.proposals[0].key} for '{term.term}' ({flag})", file=out)
        if state.pending:
            decision: Decision = "accept" if args.yes else "reject"
            state = workflow.decide(
                state, [(c.code, decision, False) for c in state.pending], reviewer, reason=args.reason or ""
            )
            print(f"{decision}ed {len(state.candidates)} generated candidates as {reviewer}", file=out)
    else:
        state, finished = settle_proposals(state, con, reviewer, read, out, dense=dense, reason=args.reason or "")
        if not finished:
            return 0
        if state.pending:
            state, finished = review(state, reviewer, read, out, reason=args.reason or "")
            if not finished:
                return 0
    state = workflow.finish(state, con)
    concept_set = state.concept_set
    assert concept_set is not None
    print(
        f"\nconcept set: {len(concept_set.entries)} codes "
        f"({sum(1 for e in concept_set.entries if e.tier == 'curated')} curated, "
        f"{sum(1 for e in concept_set.entries if e.tier == 'generated')} generated)",
        file=out,
    )
    for item in concept_set.unmappable:
        print(f"  unmappable '{item.term}': {item.reason}", file=out)
    print(f"  reviewed by {concept_set.reviewer}", file=out)
    print_qualifiers(concept_set.qualifiers, out)
    if args.json:
        print(concept_set.model_dump_json(indent=1))
    _write_outputs(state, con, args, out)
    print(f"session {state.session_id} saved", file=out)
    return 0


def _print_report(report, out: TextIO) -> None:  # noqa: ANN001

    print(f"decomposer: {report.decomposer}   retrieval: {report.retrieval}   k={report.k}", file=out)
    print(
        f"{'cohort':18} {'baseline':>8} {'decomp':>8} {'gap':>7}  seed terms -> where the curated check landed",
        file=out,
    )
    for r in report.results:
        if r.error:
            print(f"{r.cohort_id:18} {'':8} {'':8} {'':7}  ERROR {r.error_type}: {r.error}", file=out)
            continue
        landed = (
            "; ".join(
                f"{t.term} -> {t.landed}" + (f" {','.join(t.matched_cohort_ids)}" if t.matched_cohort_ids else "")
                for t in r.term_resolutions
            )
            or "(no terms)"
        )
        print(
            f"{r.cohort_id:18} {r.baseline_hierarchical_score:8.3f} {r.decomposed_hierarchical_score:8.3f} "
            f"{r.gap:+7.3f}  {landed}",
            file=out,
        )
    _print_summary(report, out)


def _print_summary(report, out: TextIO) -> None:  # noqa: ANN001
    from phenoforge.eval.decomposition import landing_rate, ran_summary

    print(f"\n{ran_summary(report)}", file=out)
    if report.n_scored:
        print(
            f"mean baseline {report.mean_baseline_hierarchical_score:.4f}   "
            f"mean decomposed {report.mean_decomposed_hierarchical_score:.4f}   mean gap {report.mean_gap:+.4f}   "
            f"cases with a term on the target {landing_rate(report):.0%}",
            file=out,
        )
        print("terms landed: " + ", ".join(f"{k} {v}" for k, v in sorted(report.landed_counts.items())), file=out)
    for line in report.skipped:
        print(f"skipped {line}", file=out)


def _cases(args: argparse.Namespace, library_dir: Path) -> list:
    from phenoforge.eval.decomposition import CASE_SETS, cases_for_split, load_cases_csv

    if args.cases.lower().endswith(".csv") or Path(args.cases).is_file():
        if args.split:
            raise PhenoforgeError("--split picks a half of the built-in cases; it does not apply to a CSV file")
        return load_cases_csv(Path(args.cases), libraries_root=library_dir)
    if args.cases not in CASE_SETS:
        raise PhenoforgeError(
            f"--cases {args.cases!r} is neither a built-in set ({', '.join(CASE_SETS)}) nor a CSV file"
        )
    if args.split == "new":
        return cases_for_split("new")
    if args.split:
        return [case for case in CASE_SETS[args.cases] if case.split == args.split]
    return list(CASE_SETS[args.cases])


def _decomposer(args: argparse.Namespace, con, dense=None):  # noqa: ANN001, ANN202
    if args.decomposer == "claude":
        from phenoforge.agent.claude import default_decomposer

        return default_decomposer(
            model=args.model, use_cache=args.repeat <= 1, timeout=args.timeout, budget=args.budget
        )
    from phenoforge.agent.offline import offline_decomposer

    return offline_decomposer(con, dense=dense)


def cmd_decompose_eval(args: argparse.Namespace) -> int:
    from phenoforge.config import libraries_dir
    from phenoforge.eval.decomposition import RepeatReport, repeat_decomposition, score_decomposition
    from phenoforge.eval.models import DecompositionReport

    if args.repeat < 1:
        raise PhenoforgeError("--repeat must be 1 or more")
    if args.timeout <= 0 or (args.budget is not None and args.budget <= 0):
        raise PhenoforgeError("--timeout and --budget are seconds and must be positive")
    library_dir = Path(args.library) if args.library else libraries_dir()
    if args.library and not (library_dir / "manifest.json").is_file():
        paths = _library_paths([args.library])
        library_dir = paths[0] if paths else library_dir
    cases = _cases(args, library_dir)
    con = _connect()
    dense = _dense(con, not args.no_dense)
    decompose_fn = _decomposer(args, con, dense)
    from phenoforge.console import progress_bar

    report: DecompositionReport | RepeatReport
    with progress_bar(not args.quiet) as progress:
        if args.repeat > 1:
            report = repeat_decomposition(
                con, library_dir, decompose_fn, args.repeat, dense=dense, k=args.k, test_cases=cases, progress=progress
            )
        else:
            report = score_decomposition(
                con, library_dir, decompose_fn, dense=dense, k=args.k, test_cases=cases, progress=progress
            )
    if args.json:
        print(report.model_dump_json(indent=1))
    elif args.repeat > 1:
        _print_repeat(report, sys.stdout)
    else:
        _print_report(report, sys.stdout)
    runs = report.runs if isinstance(report, RepeatReport) else [report]
    if all(run.n_scored == 0 for run in runs):
        from phenoforge.eval.decomposition import ran_summary

        print(ran_summary(runs[0]), file=sys.stderr)
        return 1
    return 0


def _print_repeat(report, out: TextIO) -> None:  # noqa: ANN001
    from phenoforge.eval.decomposition import ran_summary

    print(f"{report.n} runs ({report.n_runs_scored} with at least one case scored)", file=out)
    for number, run in enumerate(report.runs, start=1):
        print(
            f"  run {number}: {ran_summary(run)}" + (f"; mean gap {run.mean_gap:+.4f}" if run.n_scored else ""),
            file=out,
        )
    print(
        f"mean gap {report.mean_gap:+.4f}, 95% CI [{report.mean_gap_ci_low:+.4f}, {report.mean_gap_ci_high:+.4f}] "
        f"(bootstrap over cases of each case's mean); sd of the per-run means {report.stdev_mean_gap:.4f}",
        file=out,
    )
    for case in report.cases:
        print(
            f"{case.cohort_id:18} gap mean {case.mean_gap:+.3f} range [{case.min_gap:+.3f}, {case.max_gap:+.3f}]"
            f" sd {case.stdev_gap:.3f}  {len(case.distinct_term_sets)} distinct term sets"
            + (f", {case.n_errors} errors" if case.n_errors else ""),
            file=out,
        )


def register_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from phenoforge.console import positive_int  # the other commands' -k check

    assemble = subparsers.add_parser(
        "assemble",
        help="assemble a concept set from a population description (curated first, human gate)",
        description=ASSEMBLE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    assemble.add_argument("description", nargs="?", help='e.g. "adults hospitalized with heart failure"')
    assemble.add_argument("--reviewer", help="your name, recorded with every decision")
    assemble.add_argument(
        "--reason", help="why: recorded with every decision of this run (audit trail and the CSV's reason column)"
    )
    assemble.add_argument("--decomposer", choices=["offline", "claude"], default="offline")
    assemble.add_argument("--model", help="Claude model id (default: $PHENOFORGE_CLAUDE_MODEL or built-in)")
    assemble.add_argument(
        "--timeout", type=float, default=30.0, help="Claude: seconds to wait for one request (default 30)"
    )
    assemble.add_argument("--library", action="append", help="library id/folder to check (repeatable; default all)")
    assemble.add_argument("--k", type=positive_int("k"), default=10, help="hits per term (default 10)")
    assemble.add_argument(
        "--generator",
        choices=["hybrid", *builder_names()],
        default="hybrid",
        help="what proposes codes for terms no curated cohort settles: hybrid (top k hits) or a set builder "
        "(a billable list of its own size, fitted on the bundled libraries; k is not used)",
    )
    assemble.add_argument("--no-dense", action="store_true", help="BM25 only even when a dense index exists")
    gate = assemble.add_mutually_exclusive_group()
    gate.add_argument("--yes", action="store_true", help="accept every generated candidate without prompting")
    gate.add_argument(
        "--no-input",
        action="store_true",
        help="reject every generated candidate without prompting (curated codes only)",
    )
    assemble.add_argument("--resume", metavar="SESSION", help="continue a saved session")
    assemble.add_argument("--list", action="store_true", help="list saved sessions")
    assemble.add_argument("--audit", metavar="SESSION", help="print a session's decision trail (CSV; --json)")
    assemble.add_argument("--csv", metavar="FILE", help="write the concept set as CSV")
    assemble.add_argument("--circe", metavar="FILE", help="write the concept set as Circe concept-set JSON")
    assemble.add_argument(
        "--fhir",
        metavar="FILE",
        help="write the concept set as a FHIR R4 ValueSet (JSON; ICD-10-CM system and release)",
    )
    assemble.add_argument(
        "--json",
        action="store_true",
        help="print the concept set (or --audit trail) as JSON alone; the rest goes to stderr",
    )
    assemble.set_defaults(func=cmd_assemble)

    evaluate = subparsers.add_parser(
        "decompose-eval",
        help="score a decomposer on the decomposition test cases",
        description="For each case: hybrid search with the cohort's own name (baseline) vs. the "
        "decompose -> curated/generated pipeline from the description, both against the cohort's "
        "curated codes. Prints per-case scores, where each seed term landed, and the mean gap.",
    )
    evaluate.add_argument("--decomposer", choices=["offline", "claude"], default="offline")
    evaluate.add_argument("--model", help="Claude model id")
    evaluate.add_argument(
        "--cases",
        default="default",
        metavar="SET|FILE.csv",
        help="built-in set (default, new, ohdsi) or a CSV with columns population_description, "
        "cohort_id and optionally library, source",
    )
    evaluate.add_argument(
        "--split",
        choices=["dev", "test", "new"],
        help="dev or test half of the built-in cases, or the held-out 'new' cases",
    )
    evaluate.add_argument("--library", help="one library (id, folder name or path); default: all installed")
    evaluate.add_argument(
        "--repeat", type=int, default=1, help="run N times (uncached) and report per-case spread and the mean's 95%% CI"
    )
    evaluate.add_argument(
        "--timeout", type=float, default=30.0, help="Claude: seconds to wait for one request (default 30)"
    )
    evaluate.add_argument(
        "--budget",
        type=float,
        default=600.0,
        help="Claude: seconds for the whole run, retries included (default 600); cases after it is spent fail at once",
    )
    evaluate.add_argument("--k", type=positive_int("k"), default=10)
    evaluate.add_argument("--no-dense", action="store_true")
    evaluate.add_argument("--json", action="store_true")
    evaluate.add_argument("--quiet", action="store_true", help="no progress bar")
    evaluate.set_defaults(func=cmd_decompose_eval)
