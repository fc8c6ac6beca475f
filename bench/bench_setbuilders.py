"""Out-of-sample (leave-one-library-group-out) quality and timing of the set builders.

    python bench/bench_setbuilders.py                 # every installed library, ablation included
    python bench/bench_setbuilders.py --no-ablation   # the main table only
    python bench/bench_setbuilders.py --no-dense      # BM25 alone (what runs without the dense index)

Per library: mean hierarchical score and exact F1 of hybrid@25 and each builder, every fitted piece
trained on the bundled libraries of *other* groups (CMS-HCC V24+V28 are one group, the Elixhauser
libraries another, Quan Charlson a third). Development libraries (Elixhauser 2026.1, CMS-HCC V24,
V28) are what builders are designed on; the bundled Quan libraries are test libraries: they train
other groups' builders but their own scores are only reported (``--development-only`` still fits
on them, scores only the development libraries). ``--fit-on-development-only`` fits on the
development libraries alone (the recipe before Quan joined the training data). The ablation retrains
the membership model without one feature family at a time and reports the out-of-sample change.
Timing: seconds per cohort to retrieve and build candidates, and per method to build and score.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from phenoforge.engine.curated import list_libraries  # noqa: E402
from phenoforge.engine.db import connect  # noqa: E402
from phenoforge.engine.dense import load_dense_if_ready  # noqa: E402
from phenoforge.engine.expansion import get_hierarchy  # noqa: E402
from phenoforge.setbuild.context import CONTEXT_FEATURES  # noqa: E402
from phenoforge.setbuild.corpus import library_examples  # noqa: E402
from phenoforge.setbuild.evaluate import evaluate_library  # noqa: E402
from phenoforge.setbuild.features import FEATURE_FAMILIES, FEATURE_NAMES  # noqa: E402
from phenoforge.setbuild.groups import is_development_library, is_training_library  # noqa: E402
from phenoforge.setbuild.learned import MATRIX_COLUMNS  # noqa: E402
from phenoforge.setbuild.transfer import TRANSFER_FEATURES  # noqa: E402

METHODS = ("hybrid@25", "adaptive_cutoff", "subtree", "learned", "curated_transfer")


def misspell(name: str) -> str:
    """A deterministic typo: the two letters after the second of the longest word swapped."""
    words = name.split()
    longest = max(range(len(words)), key=lambda i: (len(words[i]), -i), default=None)
    if longest is None or len(words[longest]) < 6:
        return name
    word = words[longest]
    words[longest] = word[:2] + word[3] + word[2] + word[4:]
    return " ".join(words)


def robustness(con, hierarchy, dense, examples, reports, development) -> None:  # noqa: ANN001
    """Each robustness step measured on its own, out of sample."""
    from phenoforge.eval.harness import score_cohort
    from phenoforge.setbuild.corpus import RobustOptions, retrieve
    from phenoforge.setbuild.cutoff import CutoffParams  # noqa: F401
    from phenoforge.setbuild.evaluate import hybrid_at_k

    print()
    print("Typo tolerance: hybrid@25 mean hierarchical score with one letter pair swapped in the longest word")
    print(f"{'library':<28}{'as named':>10}{'misspelt':>10}{'corrected':>11}")
    by_library: dict[str, list] = {}
    for ex in examples:
        by_library.setdefault(ex.library_id, []).append(ex)
    for library_id, cases in by_library.items():
        sums = [0.0, 0.0, 0.0]
        for ex in cases:
            typo = misspell(ex.cohort_name)
            plain = retrieve(con, typo, dense, robust=RobustOptions(typos=False, umbrellas=False))
            fixed = retrieve(con, typo, dense, robust=RobustOptions(typos=True, umbrellas=False))
            for slot, retrieval in ((0, ex.retrieval), (1, plain), (2, fixed)):
                ex_view = type(ex)(
                    ex.library_id, ex.group, ex.cohort_id, ex.cohort_name, ex.truth, retrieval, ex.table, ex.features
                )
                predicted = hybrid_at_k(hierarchy, ex_view)
                sums[slot] += score_cohort(
                    con, ex.cohort_id, ex.cohort_name, ex.truth, predicted, "h"
                ).hierarchical_score
        n = max(len(cases), 1)
        print(f"{library_id:<28}{sums[0] / n:>10.3f}{sums[1] / n:>10.3f}{sums[2] / n:>11.3f}")
    print()
    print("Umbrella terms: subtree builder (its out-of-sample parameters) with and without umbrella nodes")
    from phenoforge.setbuild.subtree import SubtreeParams, build_subtree

    for report in reports:
        note = next((n for n in report.notes if n.startswith("subtree: {")), None)
        if note is None:
            continue
        params = SubtreeParams.model_validate(__import__("ast").literal_eval(note[len("subtree: ") :]))
        cases = by_library[report.library_id]
        n_umbrella = sum(1 for ex in cases if ex.table.umbrellas)
        values = []
        for take in (True, False):
            chosen = params.model_copy(update={"take_umbrellas": take})
            total = 0.0
            for ex in cases:
                predicted = build_subtree(hierarchy, ex.table, chosen).code_list
                total += score_cohort(con, ex.cohort_id, ex.cohort_name, ex.truth, predicted, "s").hierarchical_score
            values.append(total / max(len(cases), 1))
        print(
            f"{report.library_id:<28} with {values[0]:.3f}  without {values[1]:.3f}  "
            f"({n_umbrella} of {len(cases)} cohort names matched an umbrella note or name)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-ablation", action="store_true")
    parser.add_argument("--no-dense", action="store_true")
    parser.add_argument("--no-robustness", action="store_true", help="skip the typo and umbrella measurements")
    parser.add_argument(
        "--no-transfer",
        action="store_true",
        help="the learned builder without the cross-library curated evidence (the other groups' cohorts)",
    )
    parser.add_argument(
        "--development-only",
        action="store_true",
        help="score only the development libraries (the test libraries still train other groups' builders)",
    )
    parser.add_argument(
        "--fit-on-development-only",
        action="store_true",
        help="fit every builder on the development libraries alone (the recipe before the Quan libraries trained)",
    )
    args = parser.parse_args()
    con = connect()
    hierarchy = get_hierarchy(con)
    dense = None if args.no_dense else load_dense_if_ready(con)
    print(f"dense retriever: {'yes' if dense is not None else 'no (BM25 alone)'}")
    libraries = list_libraries()
    knowledge = None
    if not args.no_transfer:
        from phenoforge.setbuild.api import bundled_knowledge

        knowledge = bundled_knowledge(con, hierarchy, dense, libraries)
        print(f"curated knowledge: {len(knowledge.cohorts)} cohorts of {len(libraries)} libraries")
    features = MATRIX_COLUMNS if knowledge is not None else FEATURE_NAMES
    families = (
        {**FEATURE_FAMILIES, "transfer": TRANSFER_FEATURES, "context": CONTEXT_FEATURES}
        if knowledge is not None
        else FEATURE_FAMILIES
    )
    development = {lib.library_id for lib in libraries if is_development_library(lib.manifest)}
    training = {lib.library_id for lib in libraries if is_training_library(lib.manifest)}
    if args.fit_on_development_only:
        training = set(development)
    scored_libraries = [lib for lib in libraries if lib.library_id in development or not args.development_only]
    scored_ids = {lib.library_id for lib in scored_libraries}
    libraries = [lib for lib in libraries if lib.library_id in scored_ids | training]
    print(f"training libraries (each scored group held out): {', '.join(sorted(training))}")
    examples = []
    for library in libraries:
        started = time.perf_counter()
        found = library_examples(con, library, dense)
        seconds = time.perf_counter() - started
        examples += found
        role = "development" if library.library_id in development else "test"
        role += "" if library.library_id in scored_ids else ", training only"
        print(
            f"{library.library_id}: {len(found)} cohorts ({role}), retrieval+candidates "
            f"{seconds / max(len(found), 1):.2f} s/cohort"
        )
    print()
    header = f"{'library':<28}{'group':<12}{'role':<5}{'n':>4}  " + "  ".join(f"{m:>17}" for m in METHODS)
    print("Out-of-sample mean hierarchical score / exact F1 (leave-one-library-group-out)")
    print(header)
    reports = []
    for library in scored_libraries:
        report = evaluate_library(
            con,
            hierarchy,
            examples,
            library.library_id,
            training,
            METHODS,
            features=features,
            with_dense=dense is not None,
            knowledge=knowledge,
        )
        reports.append(report)
        cells = "  ".join(
            f"{report.hierarchical.get(m, float('nan')):>8.3f} / {report.exact_f1.get(m, float('nan')):.3f}"
            for m in METHODS
        )
        role = "dev" if library.library_id in development else "TEST"
        print(f"{library.library_id:<28}{report.group:<12}{role:<5}{report.n_cohorts:>4}  {cells}")
    print()
    for report in reports:
        print(f"{report.library_id}: fitted on {report.trained_on}")
        for note in report.notes:
            print(f"    {note}")
        timing = ", ".join(f"{m} {s / max(report.n_cohorts, 1) * 1000:.0f} ms" for m, s in report.seconds.items())
        print(f"    build+score per cohort: {timing}")
        fits = ", ".join(f"{m} {s:.1f} s" for m, s in report.fit_seconds.items())
        print(f"    fit (or reuse) per held-out group: {fits}")
    if not args.no_robustness:
        scored_examples = [ex for ex in examples if ex.library_id in scored_ids]
        robustness(con, hierarchy, dense, scored_examples, reports, development)
    if args.no_ablation:
        return
    print()
    print("Ablation of the learned builder: out-of-sample hierarchical / exact F1 without each feature family")
    print("(development libraries; each ablated model keeps the full model's out-of-fold selection rule and variant)")
    reports = [r for r in reports if r.library_id in development and r.learned_rule is not None]
    base = {r.library_id: (r.hierarchical.get("learned"), r.exact_f1.get("learned")) for r in reports}
    print(f"{'without':<14}" + "".join(f"{r.library_id:>30}" for r in reports))
    print(f"{'(all)':<14}" + "".join(f"{base[r.library_id][0]:>19.3f} / {base[r.library_id][1]:.3f}" for r in reports))
    for family, names in families.items():
        kept = [name for name in features if name not in names]
        cells = []
        for report in reports:
            ablated = evaluate_library(
                con,
                hierarchy,
                examples,
                report.library_id,
                training,
                ("learned",),
                features=kept,
                with_dense=dense is not None,
                rule=report.learned_rule,
                knowledge=knowledge,
                variant=report.learned_variant,
            )
            h, f = ablated.hierarchical.get("learned", float("nan")), ablated.exact_f1.get("learned", float("nan"))
            bh, bf = base[report.library_id]
            cells.append(f"{h:>10.3f} ({h - bh:+.3f}) / {f:.3f} ({f - bf:+.3f})")
        print(f"{family:<14}" + "".join(f"{cell:>30}" for cell in cells))
    print()
    print(
        "mean over libraries (learned): hierarchical "
        f"{statistics.mean(v[0] for v in base.values() if v[0] is not None):.3f}"
    )


if __name__ == "__main__":
    main()
