"""``search`` (a ranking or a set builder's list for a query) and ``lookup`` (one code)."""

from __future__ import annotations

import argparse
import json
import sys

from phenoforge.cli.common import _connect, _dense_or_none, _unit_interval
from phenoforge.console import dense_unavailable_message, positive_int, progress_bar
from phenoforge.setbuild.builders import builder_names


def cmd_search(args: argparse.Namespace) -> int:
    from phenoforge.agent.lay_terms import spell_out_for_search
    from phenoforge.engine.codes import single_code_token
    from phenoforge.engine.hybrid import search_concepts

    con = _connect()
    query, notes = spell_out_for_search(con, args.query)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.method in builder_names():
        return _search_set_builder(con, args, query)
    methods = ["bm25", "dense", "hybrid"] if args.method == "all" else [args.method]
    dense = _dense_or_none(con, any(method in ("dense", "hybrid") for method in methods))
    if single_code_token(args.query) is not None:  # the hierarchy is read only for a query that may be a code
        from phenoforge.engine.expansion import get_hierarchy
        from phenoforge.methods.set_building import code_typed_as_query

        typed_code = code_typed_as_query(get_hierarchy(con), args.query)
        if typed_code is not None:  # its digits match unrelated descriptions as words: say what the code is
            code, name = typed_code
            print(
                f"note: {code} is the code of {name!r}; the rankings match description words, not "
                f"codes: `python -m phenoforge lookup {code}` shows it, `--method learned` builds "
                "a list from its name",
                file=sys.stderr,
            )
    unavailable = None
    if dense is None and "dense" in methods:  # say why in its own words: corrupt or stale is not "not built"
        from phenoforge.engine.dense import dense_index_status

        unavailable = dense_unavailable_message(dense_index_status(con), "no dense results")
    output = {}
    for method in methods:
        result = search_concepts(
            con,
            query,
            method=method,
            k=args.k,
            dense=dense,
            dense_weight=args.dense_weight,
            dense_unavailable=unavailable,
        )
        output[method] = result
        if args.json:
            continue
        print(f"== {method}" + (" (BM25 only: no dense index)" if result.degraded and method == "hybrid" else ""))
        if not result.hits:
            print(f"   no results: {result.reason}")
        for hit in result.hits:
            print(f"{hit.rank:>3}  {hit.code:<9} {hit.score:8.4f}  {hit.name}")
    if args.json:
        print(json.dumps({method: result.model_dump() for method, result in output.items()}, indent=1))
    return 0


def _search_set_builder(con, args: argparse.Namespace, query: str) -> int:  # noqa: ANN001
    from phenoforge.methods.set_building import FITTED_DENSE_WEIGHT, build_for_free_query, describe

    dense = _dense_or_none(con, True)
    with progress_bar(enabled=not args.json) as progress:
        built = build_for_free_query(con, args.method, query, dense, progress=progress)
    if args.dense_weight != FITTED_DENSE_WEIGHT:
        built.notes.append(
            f"set builders fuse at dense weight {FITTED_DENSE_WEIGHT} (what they were fitted at); "
            f"--dense-weight {args.dense_weight} applies to bm25/dense/hybrid only"
        )
    if args.json:
        print(built.model_dump_json(indent=1))
        return 0
    print(f"== {args.method}: {len(built.codes)} billable codes (fitted on {', '.join(built.trained_on) or 'nothing'})")
    for note in [*built.notes, *([built.fallback] if built.fallback else [])]:
        print(f"   note: {note}")
    for item in built.codes:
        print(f"  {item.code:<9} {item.name}")
        print(f"            why: {describe(item.provenance)}")
    return 0


def cmd_lookup(args: argparse.Namespace) -> int:
    from phenoforge.engine.expansion import expand_ancestors, expand_descendants, lookup

    con = _connect()
    concept = lookup(con, args.code)
    if concept is None:
        print(f"{args.code!r} is not an ICD-10-CM code in this vocabulary", file=sys.stderr)
        return 1
    print(f"{concept.code}  {concept.name}  [{concept.kind}{', billable' if concept.billable else ''}]")
    print("ancestors: " + " > ".join(reversed(expand_ancestors(con, concept.code))))
    children = expand_descendants(con, concept.code, include_self=False)
    print(
        f"descendants: {len(children)}"
        + (f" ({', '.join(children[:10])}{' ...' if len(children) > 10 else ''})" if children else "")
    )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    search = sub.add_parser("search", help="search the vocabulary")
    search.add_argument("query")
    search.add_argument(
        "--method",
        choices=["bm25", "dense", "hybrid", *builder_names(), "all"],
        default="hybrid",
        help="a ranking (bm25, dense, hybrid: top k) or a set builder (adaptive_cutoff, subtree, learned, "
        "curated_transfer: a billable code list of its own size, each code with why it is there); all = the three "
        "rankings",
    )
    search.add_argument("-k", type=positive_int("k"), default=10)
    search.add_argument("--dense-weight", type=_unit_interval, default=0.5)
    search.add_argument("--json", action="store_true")
    search.set_defaults(func=cmd_search)

    lookup = sub.add_parser("lookup", help="look a code up: name, ancestors, descendants")
    lookup.add_argument("code")
    lookup.set_defaults(func=cmd_lookup)
