"""The rule-based builders on hand-made rankings over the fixture vocabulary."""

from __future__ import annotations

import pytest

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild.assemble import agreement
from phenoforge.setbuild.candidates import AGREEMENT_DEPTH, Retrieval, build_candidates
from phenoforge.setbuild.cutoff import CutoffParams, build_cutoff
from phenoforge.setbuild.nodes import billable_below
from phenoforge.setbuild.subtree import SubtreeParams, build_subtree


def codes(hierarchy: Hierarchy, ids: list[int]) -> list[str]:
    return sorted(hierarchy.code[i] for i in ids)


def test_billable_below_expands_a_non_billable_node_and_keeps_a_billable_one(hierarchy: Hierarchy) -> None:
    e112 = hierarchy.resolve("E11.2")
    assert codes(hierarchy, billable_below(hierarchy, e112)) == ["E11.21", "E11.22", "E11.29"]
    e1122 = hierarchy.resolve("E11.22")
    assert billable_below(hierarchy, e1122) == [e1122]
    assert codes(hierarchy, billable_below(hierarchy, hierarchy.resolve("S72.001"))) == ["S72.001A", "S72.001D"]


def test_candidates_take_the_best_hits_siblings_and_record_the_hit_they_came_from(hierarchy: Hierarchy) -> None:
    retrieval = Retrieval(query="type 2 diabetes kidney", bm25=[("E11.21", 9.0), ("E11.22", 8.0)])
    table = build_candidates(hierarchy, retrieval)
    candidates = {hierarchy.code[i]: hierarchy.code[o] for i, o in zip(table.ids, table.origin, strict=True)}
    assert candidates["E11.21"] == "E11.21"
    assert candidates["E11.29"] == "E11.2"  # not retrieved: a sibling rolled up from the subcategory
    assert "E11.9" in candidates  # the category's other billable codes
    assert all(hierarchy.billable[i] for i in table.ids)


def test_no_rankings_give_no_candidates_and_an_empty_set_that_says_why(hierarchy: Hierarchy) -> None:
    table = build_candidates(hierarchy, Retrieval(query="zzz", bm25=[]))
    assert len(table) == 0
    for built in (build_cutoff(hierarchy, table), build_subtree(hierarchy, table)):
        assert built.codes == []
        assert any("no candidates" in note for note in built.notes)


def test_cutoff_keeps_hits_both_retrievers_back_and_expands_a_category_hit(hierarchy: Hierarchy) -> None:
    retrieval = Retrieval(
        query="heart failure",
        bm25=[("I50", 10.0), ("I50.9", 9.0), ("I48.0", 1.0)],
        dense=[("I50", 0.9), ("I50.9", 0.85), ("I48.0", 0.1)],
    )
    built = build_cutoff(hierarchy, build_candidates(hierarchy, retrieval), CutoffParams(min_agreement=0.5))
    assert built.code_list == ["I50.21", "I50.22", "I50.9"]
    by_code = {item.code: item.provenance for item in built.codes}
    assert by_code["I50.21"].source == "rollup" and by_code["I50.21"].via_code == "I50"
    assert by_code["I50.9"].via_code == "I50" and by_code["I50.9"].via_rank == 1  # first reason wins
    assert "I48.0" not in by_code


def test_cutoff_always_keeps_the_top_hit(hierarchy: Hierarchy) -> None:
    retrieval = Retrieval(query="asthma", bm25=[("J45.909", 2.0), ("J45.20", 1.9)])
    built = build_cutoff(hierarchy, build_candidates(hierarchy, retrieval), CutoffParams(min_agreement=1.5))
    assert built.code_list == ["J45.909"]
    assert "top hit kept" in built.codes[0].provenance.rule


def test_subtree_takes_a_node_whose_children_were_retrieved(hierarchy: Hierarchy) -> None:
    retrieval = Retrieval(query="diabetic kidney", bm25=[("E11.21", 5.0), ("E11.22", 4.0), ("J45.20", 0.5)])
    table = build_candidates(hierarchy, retrieval)
    params = SubtreeParams(min_child_share=0.6, min_children_hit=2, leaf_agreement=0.95, take_umbrellas=False)
    built = build_subtree(hierarchy, table, params)
    assert built.code_list == ["E11.21", "E11.22", "E11.29"]
    e1129 = next(item for item in built.codes if item.code == "E11.29").provenance
    assert e1129.source == "rollup" and e1129.via_code == "E11.2" and "2 of its 3 children" in e1129.rule
    stricter = build_subtree(hierarchy, table, params.model_copy(update={"min_child_share": 0.8}))
    assert "E11.29" not in stricter.code_list


def test_subtree_takes_a_hit_whose_own_description_matches(hierarchy: Hierarchy) -> None:
    retrieval = Retrieval(query="Heart failure", bm25=[("I50", 9.0), ("I50.9", 8.0)])
    params = SubtreeParams(min_node_match=1.0, leaf_agreement=0.5, take_umbrellas=False)
    built = build_subtree(hierarchy, build_candidates(hierarchy, retrieval), params)
    assert set(built.code_list) == {"I50.21", "I50.22", "I50.9"}
    assert all(item.provenance.via_code == "I50" for item in built.codes)


def test_subtree_takes_an_umbrella_node_the_vocabulary_names(hierarchy: Hierarchy) -> None:
    retrieval = Retrieval(
        query="congestive heart disease", bm25=[("I48.0", 0.2)], umbrellas={"I50": "congestive heart disease"}
    )
    table = build_candidates(hierarchy, retrieval)
    with_umbrellas = build_subtree(hierarchy, table, SubtreeParams(leaf_agreement=2.0))
    assert {"I50.21", "I50.22", "I50.9"} <= set(with_umbrellas.code_list)
    assert "umbrella" in next(i for i in with_umbrellas.codes if i.code == "I50.9").provenance.rule
    without = build_subtree(hierarchy, table, SubtreeParams(leaf_agreement=2.0, take_umbrellas=False))
    assert "I50.9" not in without.code_list


def test_agreement_scales_cosines_between_the_best_and_the_one_at_agreement_depth(hierarchy: Hierarchy) -> None:
    filler = [(f"NOT-A-CODE-{i}", 0.5) for i in range(AGREEMENT_DEPTH - 2)]
    dense = [("I50", 0.9), ("I50.9", 0.7), *filler, ("I48.0", 0.3)]  # I48.0 ranks below the depth
    table = build_candidates(hierarchy, Retrieval(query="heart failure", bm25=[("I50", 4.0)], dense=dense))
    assert table.agreement_floor_dense == 0.5 and table.floor_dense == 0.3
    assert agreement(table, hierarchy.resolve("I50.9")) == pytest.approx(0.5 * (0.7 - 0.5) / (0.9 - 0.5))
    assert agreement(table, hierarchy.resolve("I48.0")) == 0.0  # below the floor: no dense backing, not negative
    assert agreement(table, hierarchy.resolve("I50")) == pytest.approx(1.0)


def test_built_codes_equal_validated_ones(hierarchy: Hierarchy) -> None:
    """``finish`` constructs the records without validating: they equal what validation makes of them,
    a numpy rank included (read as the ``int`` it stands for)."""
    import numpy as np

    from phenoforge.setbuild.assemble import SetAssembler
    from phenoforge.setbuild.models import BuiltSet

    retrieval = Retrieval(
        query="heart failure",
        bm25=[("I50", 10.0), ("I50.9", 9.0), ("I48.0", 1.0)],
        dense=[("I50", 0.9), ("I50.9", 0.85), ("I48.0", 0.1)],
    )
    table = build_candidates(hierarchy, retrieval)
    assembler = SetAssembler(hierarchy, "learned", "heart failure")
    assembler.add_node(hierarchy.resolve("I48.0"), "model", np.float64(0.1234567891), "p >= 0.5", via_rank=np.int64(3))
    for built in (build_cutoff(hierarchy, table), build_subtree(hierarchy, table), assembler.finish()):
        assert built.codes
        validated = BuiltSet.model_validate(built.model_dump())
        assert validated == built and validated.model_dump_json() == built.model_dump_json()
        for item in built.codes:
            rank = item.provenance.via_rank
            assert type(item.provenance.score) is float and (rank is None or type(rank) is int)
    assert assembler.result.codes[0].provenance.score == 0.123457
