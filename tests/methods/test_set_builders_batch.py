"""The set builders' batch step: one pass over a run's queries gives exactly the one-at-a-time sets,
keeps no candidate table once a block is done, and predicts a block's candidates in one model call."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from phenoforge.engine.curated import load_library
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.eval.harness import run_benchmark
from phenoforge.methods import MethodContext, available_methods, set_builder_pass, set_building
from phenoforge.methods.base import RunState
from phenoforge.methods.retrieval import Retrieval
from phenoforge.setbuild import learned
from phenoforge.setbuild.trees import TreeEnsemble
from tests.methods.test_set_builders import BUILDERS, ELIX_ID, HCC_ID, installed, small_models  # noqa: F401


def _results(con: duckdb.DuckDBPyConnection, library: Path, methods: list[str]):  # noqa: ANN202
    report = run_benchmark(con, library, load_library(library).cohort_ids, methods=methods)
    answers = [(r.method, r.cohort_id, r.predicted_codes, r.provenance) for r in report.results]
    notes = {name: record.notes for name, record in report.methods.items()}
    return answers, notes


def _one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in BUILDERS:
        monkeypatch.setattr(available_methods(include_entry_points=False)[name], "predict_batch", None)


@pytest.mark.usefixtures("small_models")
@pytest.mark.parametrize("block", [1, 2, 32])
def test_the_batch_gives_the_one_at_a_time_sets(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    block: int,
) -> None:
    for library_id in (ELIX_ID, HCC_ID):
        with monkeypatch.context() as patch:
            _one_at_a_time(patch)
            expected = _results(fixture_con, installed[library_id], ["hybrid", *BUILDERS])
        monkeypatch.setattr(set_builder_pass, "BATCH_QUERIES", block)
        assert _results(fixture_con, installed[library_id], ["hybrid", *BUILDERS]) == expected, (library_id, block)
        for order in (BUILDERS[::-1], ["curated_transfer"], ["subtree", "learned"]):
            batched = _results(fixture_con, installed[library_id], order)
            wanted = [row for row in expected[0] if row[0] in order]
            assert sorted(batched[0]) == sorted(wanted), (library_id, order)


@pytest.mark.usefixtures("small_models")
def test_a_block_is_predicted_in_one_model_call(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    original = learned.MembershipModel.probabilities

    def counting(self: learned.MembershipModel, features: np.ndarray) -> np.ndarray:
        calls.append(len(features))
        return original(self, features)

    library = installed[ELIX_ID]
    cohorts = len(load_library(library).cohort_ids)
    run_benchmark(fixture_con, library, load_library(library).cohort_ids, methods=BUILDERS)  # fits the model
    monkeypatch.setattr(learned.MembershipModel, "probabilities", counting)
    monkeypatch.setattr(set_builder_pass, "BATCH_QUERIES", 2)
    run_benchmark(fixture_con, library, load_library(library).cohort_ids, methods=BUILDERS)
    assert cohorts > 2 and 0 < len(calls) <= -(-cohorts // 2), (calls, cohorts)


@pytest.mark.usefixtures("small_models")
def test_the_pass_keeps_no_candidate_table_and_hands_each_set_over_once(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811
) -> None:
    library = load_library(installed[ELIX_ID])
    context = MethodContext(
        con=fixture_con,
        hierarchy=get_hierarchy(fixture_con),
        retrieval=Retrieval(fixture_con, None, 50),
        library_id=library.library_id,
        library_group="elixhauser",
        library_path=str(library.path),
        methods=tuple(BUILDERS),
    )
    fitted = set_building.fitted_for(context)
    queries = ["Heart failure", "Asthma", "Heart failure"]
    first = set_building.built_sets(context, "adaptive_cutoff", queries, fitted)
    assert [built.query for built in first] == queries
    run = context.shared.get(set_building.SetBuildingRun)
    assert not run.prepared  # no table kept beyond its block
    waiting = run.built
    assert set(waiting) == {"subtree", "learned", "curated_transfer"}
    assert [b.code_list for b in set_building.built_sets(context, "learned", queries, fitted)] == [
        set_building.build_for(context, "learned", query, fitted).code_list for query in queries
    ]
    assert "learned" not in waiting  # handed over once: the run's entries hold it now


def test_predict_many_equals_one_call_per_matrix() -> None:
    rng = np.random.default_rng(0)
    columns = len(learned.ALL_FEATURE_NAMES)
    x = rng.normal(size=(300, columns))
    y = (x[:, 0] + 0.3 * rng.normal(size=300) > 0).astype(int)
    model = learned.MembershipModel.__new__(learned.MembershipModel)
    model.trees = TreeEnsemble.from_estimator(learned._fit(x, y, np.ones(300)))
    model._columns = list(range(columns))
    matrices = [x[:7], np.zeros((0, columns)), x[7:8], x[8:120], np.zeros((0, columns))]
    expected = [model.probabilities(matrix) for matrix in matrices]
    got = learned.predict_many(model, matrices)
    assert [len(p) for p in got] == [7, 0, 1, 112, 0]
    assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))  # bit for bit
    assert [len(p) for p in learned.predict_many(model, [np.zeros((0, columns))])] == [0]


@pytest.mark.usefixtures("small_models")
def test_run_entries_equal_validated_ones(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811
) -> None:
    """``to_entries`` skips pydantic's validation: what it makes must be what validation would make."""
    from phenoforge.eval.runs import RunEntry

    built = set_building.build_for_free_query(fixture_con, "adaptive_cutoff", "Heart failure")
    entries = set_building.to_entries(built)
    assert entries and [RunEntry.model_validate(entry.model_dump()) for entry in entries] == entries
    assert all(type(entry.score) is float and type(entry.rank) is int for entry in entries)


@pytest.mark.parametrize("builder", BUILDERS)
def test_the_batch_handles_typed_codes_unknown_codes_and_foreign_words_as_one_at_a_time_does(
    fixture_con: duckdb.DuckDBPyConnection, builder: str
) -> None:
    """The batched pass skipped build_for's query handling: a typed code was searched by its digits,
    an ICD-9 code matched score codes, and words in another script were dropped without a note."""
    from phenoforge.setbuild.candidates import RETRIEVAL_DEPTH
    from tests.methods.test_set_builders_reuse_and_copies import _install_development_libraries

    _install_development_libraries()
    queries = ["I50", "428.0", "Heart failure сердечная", "heart failure", "", "сердечная недостаточность"]

    def context() -> MethodContext:
        return MethodContext(
            con=fixture_con,
            hierarchy=get_hierarchy(fixture_con),
            retrieval=Retrieval(fixture_con, None, RETRIEVAL_DEPTH),
            methods=tuple(BUILDERS),
        )

    one = context()
    fitted = set_building.fitted_for(one)
    expected = [set_building.build_for(one, builder, query, fitted) for query in queries]
    batched = set_building.built_sets(context(), builder, queries, fitted)
    assert [(b.code_list, b.notes) for b in batched] == [(e.code_list, e.notes) for e in expected]
    assert any("is the code" in note for note in batched[0].notes), batched[0].notes
    assert not batched[1].codes and "not an ICD-10-CM code" in batched[1].notes[0], batched[1].notes
    assert any("ignored" in note for note in batched[2].notes), batched[2].notes


def test_the_transfer_fallback_reuses_the_learned_sets_entries() -> None:
    """curated_transfer falling back hands over the learned set's very code list: converted once, the
    same entries in both runs; a set with equal codes in another list is converted on its own."""
    from types import SimpleNamespace

    from phenoforge.methods.set_building import _shared_entries, to_entries
    from phenoforge.setbuild.models import BuiltCode, BuiltSet, CodeProvenance

    provenance = CodeProvenance(source="model", via_code="E11", via_rank=1, score=0.9, rule="p >= 0.5")
    codes = [BuiltCode(code=c, name=c, provenance=provenance) for c in ("E11.9", "E11.21")]
    learned = BuiltSet(method="learned", query="diabetes", codes=codes)
    fallback = learned.model_copy(update={"method": "curated_transfer", "notes": ["the learned set"]})
    lookalike = BuiltSet(method="curated_transfer", query="diabetes", codes=list(codes))
    context = SimpleNamespace(shared=RunState())
    first = _shared_entries(context, learned)  # type: ignore[arg-type]
    again = _shared_entries(context, fallback)  # type: ignore[arg-type]
    assert again == first and all(a is b for a, b in zip(again, first, strict=True)) and again is not first
    other = _shared_entries(context, lookalike)  # type: ignore[arg-type]
    assert other == to_entries(lookalike) and not any(a is b for a, b in zip(other, first, strict=True))
    assert context.shared.get(set_building.SetBuildingRun).entries == {}  # handed over once, then forgotten


@pytest.mark.usefixtures("small_models")
def test_rankings_read_as_rows_give_the_sets_the_code_lists_give(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The builders map a retriever's rows to concept ids in one gather; a retriever without rows
    (a plugin's) is read as (code, score) lists 5,000 deep: the same sets and provenance either way."""
    with monkeypatch.context() as patch:
        patch.setattr(Retrieval, "rows", lambda self, query, depth, dense=False: None)
        expected = _results(fixture_con, installed[HCC_ID], BUILDERS)
    read_as_rows: list[bool] = []
    original = Retrieval.rows

    def watched(self: Retrieval, query: str, depth: int, dense: bool = False):  # noqa: ANN202
        found = original(self, query, depth, dense)
        read_as_rows.append(found is not None)
        return found

    monkeypatch.setattr(Retrieval, "rows", watched)
    assert _results(fixture_con, installed[HCC_ID], BUILDERS) == expected
    assert read_as_rows and any(read_as_rows)  # the fixture's BM25 answers in rows


@pytest.mark.usefixtures("small_models")
def test_typo_corrected_names_are_ranked_in_one_batch_and_corrected_once(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Names with typos are searched as corrected; those forms are ranked together before the pass
    (one at a time they cost an embedding and a full scan each) and corrected once per name."""
    from tests.fixture_library import write_icd_library

    typos = {"t1": ("Type 2 diabetis mellitus", ["E11"], True), "t2": ("Astma", ["J45"], True)}
    library = write_icd_library(tmp_path / "typos", typos, library_id="typos-fixture", group="typos")
    corrections: list[str] = []
    real_robust = set_builder_pass.robust_query
    monkeypatch.setattr(
        set_builder_pass, "robust_query", lambda con, query: corrections.append(query) or real_robust(con, query)
    )
    batches: list[list[str]] = []
    real_prefetch = Retrieval.prefetch

    def recording(self: Retrieval, queries, *args, **kwargs):  # noqa: ANN001, ANN202
        batches.append(list(queries))
        return real_prefetch(self, queries, *args, **kwargs)

    monkeypatch.setattr(Retrieval, "prefetch", recording)
    answers, _notes = _results(fixture_con, library, BUILDERS)
    corrected = {real_robust(fixture_con, name)[0] for name, _codes, _billable in typos.values()}
    assert corrected.isdisjoint(name for name, _c, _b in typos.values())  # both names really are corrected
    assert any(corrected <= set(batch) for batch in batches)  # ranked together, up front
    assert sorted(corrections) == sorted(name for name, _c, _b in typos.values())  # each corrected once
    assert {cohort for _method, cohort, codes, _p in answers if codes} == {"t1", "t2"}


@pytest.mark.usefixtures("small_models")
@pytest.mark.parametrize("chunk", [1, 3])
def test_a_run_scored_in_chunks_gives_the_one_pass_sets_and_notes(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    chunk: int,
) -> None:
    """The harness answers a large library ``RESULT_CHUNK`` cohorts at a time: the set builders (their
    shared pass, the library context, curated_transfer's hand-over of the learned set) give what one
    pass gives, with the same notes, and the corrected names are ranked in one call for the whole run."""
    from phenoforge.eval import harness

    for library_id in (ELIX_ID, HCC_ID):
        expected = _results(fixture_con, installed[library_id], ["hybrid", *BUILDERS])
        with monkeypatch.context() as patch:
            patch.setattr(harness, "RESULT_CHUNK", chunk)
            calls: list[int] = []
            original = set_builder_pass._prefetch_corrected

            def counting(
                context: MethodContext,
                queries: list[str],
                calls: list[int] = calls,
                original=original,  # noqa: ANN001
            ) -> None:
                calls.append(len(queries))
                original(context, queries)

            patch.setattr(set_builder_pass, "_prefetch_corrected", counting)
            assert _results(fixture_con, installed[library_id], ["hybrid", *BUILDERS]) == expected, library_id
        cohorts = len(load_library(installed[library_id]).cohort_ids)
        assert cohorts > chunk and calls and calls[0] >= cohorts - 1, (calls, cohorts)  # the whole run at first
