"""The one scoring path: the drilldown, the slider and the report agree code by code."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from phenoforge.dashboard.drilldown import cohort_drilldown
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.eval.harness import collect_rankings, rescore_hybrid, run_benchmark, score_cohort
from phenoforge.eval.matching import NearestIndex, match_cohort
from phenoforge.eval.measures import DEFAULT_MEASURES, measure, parse_measures
from phenoforge.eval.metrics import distance_weighted_score
from tests.fixture_library import write_icd_library


def test_drilldown_credit_equals_the_report_through_the_diamond(fixture_con: duckdb.DuckDBPyConnection) -> None:
    # E11.51 sits under E11.5 and I73.9: the report and the drilldown once disagreed on I73 vs E11.51
    result = score_cohort(fixture_con, "pvd", "Peripheral vascular disease", ["E11.51"], ["I73", "E11.9"], "x")
    view = cohort_drilldown(fixture_con, result)
    rows = {row.code: row for row in view.rows}
    assert rows["I73"].tree_distance == 2  # I73 -> I73.9 -> E11.51
    assert rows["I73"].best_match == "E11.51"
    credits = [rows[code].partial_credit for code in result.predicted_codes]
    assert result.over_inclusion_penalty == pytest.approx(sum(1 - c for c in credits) / len(credits))
    assert result.coverage == pytest.approx(rows["E11.51"].partial_credit)
    assert rows["E11.51"].partial_credit == pytest.approx(distance_weighted_score(2))


def test_nearest_ties_go_to_the_first_listed_target(fixture_con: duckdb.DuckDBPyConnection) -> None:
    hierarchy = get_hierarchy(fixture_con)
    ids = [hierarchy.resolve(code) for code in ("E11.22", "E11.21")]
    nearest = NearestIndex(hierarchy, [i for i in ids if i is not None]).nearest(hierarchy.resolve("E11.29"))
    assert (hierarchy.code[nearest.target], nearest.distance) == ("E11.22", 2)  # type: ignore[index]


def test_exact_match_normalises_both_sides(fixture_con: duckdb.DuckDBPyConnection) -> None:
    result = score_cohort(fixture_con, "c", "c", ["E1121", "e11.21", "E11.9"], ["E11.21", "E119"], "x")
    assert result.ground_truth_codes == ["E11.21", "E11.9"]
    assert (result.exact_precision, result.exact_recall, result.exact_f1) == (1.0, 1.0, 1.0)


def test_unknown_predicted_codes_count_against_precision(fixture_con: duckdb.DuckDBPyConnection) -> None:
    result = score_cohort(fixture_con, "c", "c", ["E11.9"], ["E11.9", "ZZZ.99"], "x")
    assert result.exact_precision == 0.5 and result.over_inclusion_penalty == 0.5


def test_measures_describe_themselves_and_parameters_change_the_key() -> None:
    names = [m.key for m in DEFAULT_MEASURES]
    assert names[:3] == ["hierarchical", "coverage", "over_inclusion"]
    assert not measure("over_inclusion").higher_is_better and measure("coverage").higher_is_better
    strict = measure("coverage(max_distance=2)")
    assert strict.key == "coverage(max_distance=2)" and strict.info().parameters == {"max_distance": 2}
    with pytest.raises(ValueError, match="unknown measure"):
        measure("ndcg")
    with pytest.raises(ValueError, match="max_distance"):
        measure("exact_f1(max_distance=2)")
    assert parse_measures(["coverage", "coverage"]) == [measure("coverage")]
    assert [m.key for m in parse_measures(["exact_f1", "exact_precision"])] == ["exact_f1", "exact_precision"]


def test_a_parameterised_measure_is_scored_and_recorded(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    library = write_icd_library(tmp_path / "lib", {"dm2": ("Type 2 diabetes mellitus", ["E11.21"], False)}, "lib")
    report = run_benchmark(
        fixture_con, library, ["dm2"], methods=["bm25"], k=5, measures=["coverage", "coverage(max_distance=2)"]
    )
    (result,) = report.results
    assert set(result.scores) == {"coverage", "coverage(max_distance=2)"}
    assert result.scores["coverage(max_distance=2)"] <= result.scores["coverage"]
    assert [m.name for m in report.measures] == ["coverage", "coverage(max_distance=2)"]
    assert report.means["coverage"]["bm25"] == pytest.approx(result.coverage)


def test_slider_rescoring_equals_the_benchmark(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    library = write_icd_library(
        tmp_path / "lib",
        {
            "dm2": ("Type 2 diabetes mellitus", ["E11"], True),
            "hf": ("Heart failure", ["I50"], True),
        },
        "lib",
    )
    cache = collect_rankings(fixture_con, library, ["dm2", "hf"], depth=100)
    fast = rescore_hybrid(fixture_con, cache, 0.5, k=5)
    slow = run_benchmark(fixture_con, library, ["dm2", "hf"], methods=["hybrid"], k=5)
    assert [r.model_dump(exclude={"provenance"}) for r in fast.results] == [
        r.model_dump(exclude={"provenance"}) for r in slow.results
    ]


def test_match_cohort_reports_unknown_truth(fixture_con: duckdb.DuckDBPyConnection) -> None:
    matches = match_cohort(get_hierarchy(fixture_con), ["E11.9", "Q99.99"], ["E11.9"])
    assert matches.unresolvable_truth == ["Q99.99"] and matches.truth_codes == ["E11.9"]


def test_dense_weight_and_k_are_validated(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    library = write_icd_library(tmp_path / "lib", {"dm2": ("Type 2 diabetes mellitus", ["E11.21"], False)}, "lib")
    with pytest.raises(ValueError, match="dense_weight"):
        run_benchmark(fixture_con, library, ["dm2"], dense_weight=1.5)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        run_benchmark(fixture_con, library, ["dm2"], k=0)


def test_partial_credits_are_computed_once_per_side_and_never_shared_for_writing(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    hierarchy = get_hierarchy(fixture_con)
    matches = match_cohort(hierarchy, ["E11.51", "I50.21"], ["I73", "E11.9", "I50.22", "J45"])
    for spec in ("coverage", "over_inclusion", "hierarchical", "coverage(max_distance=2)"):
        scored = measure(spec)
        max_distance = int(scored.parameters["max_distance"])
        for side, rows in (("truth", matches.truth), ("predicted", matches.predicted)):
            expected = [distance_weighted_score(row.distance, max_distance) for row in rows]
            first = scored.credits(side, matches)  # type: ignore[attr-defined]
            assert first == expected
            first.append(99.0)  # a caller's change to the list it got must not reach the next caller
            assert scored.credits(side, matches) == expected  # type: ignore[attr-defined]
    assert measure("coverage(max_distance=2)").compute(matches) != measure("coverage").compute(matches)


def test_display_codes_resolve_as_resolve_does(fixture_con: duckdb.DuckDBPyConnection) -> None:
    hierarchy = get_hierarchy(fixture_con)
    direct = hierarchy.ids_by_display_code()
    assert direct and all(hierarchy.resolve(code) == node for code, node in direct.items())
    assert all(
        hierarchy.code[node] in direct for node in hierarchy.code if hierarchy.resolve(hierarchy.code[node]) == node
    )


def test_a_run_repeating_the_previous_runs_codes_reuses_its_matches(
    fixture_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """curated_transfer often answers with the learned set: its matches are the learned run's, and its
    results equal those of scoring it alone; other codes, or another cohort, are matched afresh."""
    from phenoforge.eval import evaluate as evaluate_module
    from phenoforge.eval.evaluate import TruthIndexes, evaluate
    from phenoforge.eval.harness import score_runs
    from phenoforge.eval.qrels import CuratedSet, Qrels
    from phenoforge.eval.runs import Run, RunEntry

    hierarchy = get_hierarchy(fixture_con)
    qrels = Qrels(
        library_id="lib",
        library_path="",
        cohorts={
            "dm": CuratedSet(cohort_id="dm", cohort_name="diabetes", codes=["E11.21", "E11.9"]),
            "hf": CuratedSet(cohort_id="hf", cohort_name="heart failure", codes=["I50.9"]),
        },
    )

    def run(name: str, dm: list[str], hf: list[str]) -> Run:
        cohorts = {"dm": dm, "hf": hf}
        return Run(
            name=name,
            cohorts={
                c: [RunEntry(code=code, rank=r, provenance=[name]) for r, code in enumerate(codes, 1)]
                for c, codes in cohorts.items()
            },
        )

    runs = [run("learned", ["E11.9", "E11.22"], ["I50"]), run("transfer", ["E11.9", "E11.22"], ["I50.9"])]
    runs.append(run("other", ["E11.9"], ["I50"]))
    calls: list[tuple[str, ...]] = []
    original = evaluate_module.match_cohort

    def counting(hierarchy_, truth, predicted, index=None):  # noqa: ANN001, ANN202
        calls.append(tuple(predicted))
        return original(hierarchy_, truth, predicted, index)

    monkeypatch.setattr(evaluate_module, "match_cohort", counting)
    report = score_runs(hierarchy, qrels, runs)
    # learned: 2 cohorts; transfer: only hf differs; other: dm differs from transfer's, hf from transfer's
    assert calls == [("E11.9", "E11.22"), ("I50",), ("I50.9",), ("E11.9",), ("I50",)]
    alone = [r for one in runs for r in evaluate(hierarchy, qrels, one, None, TruthIndexes(hierarchy))]
    assert len(report.results) == len(alone) == 6
    assert sorted(r.model_dump_json() for r in report.results) == sorted(r.model_dump_json() for r in alone)
