"""Text a user or a file supplies is shown as text on every page, and the dashboard runs only
registered methods (issue 34: markup injection, code execution from the browser)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from phenoforge import app_state
from phenoforge.app_state import BenchmarkParameters
from phenoforge.dashboard.benchmark import import_run_and_save, run_and_save, saved_run
from phenoforge.dashboard.drilldown_source import results_for
from phenoforge.engine.curated import load_library
from phenoforge.errors import PhenoforgeError
from tests.dashboard.fixture_data import FIXTURE_COHORTS, LIBRARY_DIR
from tests.fixture_library import write_icd_library

HOSTILE = "**bold** [x](http://e.x) ![i](http://e.x/i.png) :red[c] <b>h</b>"
RAW = ("**bold**", "[x](http://e.x)", "![i](", ":red[c]", "<b>h</b>")
"""Pieces of HOSTILE that Markdown (or Plotly's HTML subset) would act on if passed through unescaped."""
PAGES = [
    "app.py",
    "pages/1_Benchmark.py",
    "pages/2_Cohort_drilldown.py",
    "pages/3_Hybrid_weight.py",
    "pages/4_Decomposition.py",
    "pages/5_Explore.py",
    "pages/6_Assemble.py",
    "pages/7_Compare.py",
    "pages/8_Versions.py",
]


def hostile_library(root: Path) -> Path:
    """The fixture library again, every cohort renamed to markup and a manifest name of markup."""
    return write_icd_library(
        root / "hostile",
        {f"h{cid}": (f"{HOSTILE} {name}", codes, False) for cid, (name, codes) in FIXTURE_COHORTS.items()},
        "hostile-lib",
        name=HOSTILE,
        description=HOSTILE,
    )


def rendered_texts(at: AppTest) -> list[str]:
    """Every string the page hands to a Markdown renderer (the elements that interpret Markdown)."""
    texts: list[str] = []
    for kind in ("markdown", "caption", "info", "warning", "error", "success", "subheader", "header", "title"):
        texts += [str(element.value) for element in getattr(at, kind)]
    texts += [str(e.label) for e in at.expander]
    texts += [f"{m.label} {m.value} {m.delta}" for m in at.metric]
    texts += [str(cell) for table in at.table for cell in table.value.to_numpy().ravel()]  # st.table: Markdown cells
    return texts


def assert_text_only(at: AppTest) -> None:
    assert not at.exception, at.exception
    for text in rendered_texts(at):
        for raw in RAW:
            assert raw not in text, f"{raw!r} reaches Markdown unescaped in {text!r}"


@pytest.fixture
def hostile(dash: Path, dash_con: duckdb.DuckDBPyConnection) -> str:
    """A hostile library installed, with a benchmark run and an uploaded run named with markup; returns
    the uploaded run's id."""
    library = load_library(hostile_library(dash / "libraries"))
    run_and_save(
        dash_con, library, BenchmarkParameters(methods=["bm25"], k=10, dense_weight=0.5, cohort_ids=library.cohort_ids)
    )
    upload = b"cohort_id,code\nh503,E11.9\nh519,I50.9\n"
    return import_run_and_save(dash_con, library, upload, "mine.csv", ["bm25"], name=HOSTILE).run_id


@pytest.fixture(autouse=True)
def _remove_hostile(dash: Path) -> Iterator[None]:
    yield
    import shutil

    shutil.rmtree(dash / "libraries" / "hostile", ignore_errors=True)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_shows_a_hostile_library_and_run_as_text(
    app: Callable[[str], AppTest], hostile: str, page: str
) -> None:
    at = app(page)
    at.query_params["library"] = "hostile-lib"
    at.query_params["cohort"] = "h503"
    at.query_params["method"] = "bm25"
    at.query_params["run"] = hostile
    at.run()
    if page == "pages/1_Benchmark.py":
        at.session_state["bench_run_id"] = hostile
        at.run()
    assert_text_only(at)


@pytest.mark.parametrize("page", ["pages/2_Cohort_drilldown.py", "pages/5_Explore.py"])
def test_a_hostile_url_is_shown_as_text(app: Callable[[str], AppTest], hostile: str, page: str) -> None:
    at = app(page)
    at.query_params["run"] = HOSTILE
    at.query_params["code"] = HOSTILE
    at.query_params["q"] = HOSTILE
    at.run()
    assert_text_only(at)


def test_chart_labels_from_supplied_names_carry_no_html(dash_con: duckdb.DuckDBPyConnection, hostile: str) -> None:
    """Plotly renders <a>, <b> and <span style> in axis labels and titles: supplied names are escaped."""
    from phenoforge.dashboard.markdown import chart_text

    assert "<" not in chart_text(HOSTILE) and "&lt;b&gt;" in chart_text(HOSTILE)
    run = saved_run(hostile)
    assert any(HOSTILE in r.method for r in run.report.results)


def test_the_benchmark_page_has_no_module_function_field_by_default(app: Callable[[str], AppTest]) -> None:
    at = app("pages/1_Benchmark.py").run()
    assert not at.exception
    assert not [t for t in at.text_input if t.key == "bench_custom"]


def test_a_module_function_method_is_refused_unless_the_server_allows_it(
    dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    library = load_library(dash / "libraries" / LIBRARY_DIR)
    spec = "tests.methods.plugin_methods:top_category"
    parameters = BenchmarkParameters(methods=["bm25", spec], k=5, dense_weight=0.5, cohort_ids=library.cohort_ids[:1])
    with pytest.raises(PhenoforgeError, match=re.escape("not a registered method")):
        run_and_save(dash_con, library, parameters)
    with pytest.raises(PhenoforgeError, match="not a registered method"):
        import_run_and_save(dash_con, library, b"cohort_id,code\n503,E11.9\n", "r.csv", ["this:s"])
    with pytest.raises(PhenoforgeError, match="not a registered method"):  # the drilldown's live run
        results_for(dash_con, library, "503", ["bm25", spec])
    assert app_state.list_benchmark_runs() == []


def test_the_zen_of_python_is_never_imported(dash: Path, dash_con: duckdb.DuckDBPyConnection) -> None:
    import sys

    sys.modules.pop("this", None)
    library = load_library(dash / "libraries" / LIBRARY_DIR)
    parameters = BenchmarkParameters(methods=["this:s"], k=5, dense_weight=0.5, cohort_ids=library.cohort_ids[:1])
    with pytest.raises(PhenoforgeError):
        run_and_save(dash_con, library, parameters)
    assert "this" not in sys.modules


def test_bare_urls_and_addresses_are_not_autolinked() -> None:
    """GitHub-flavoured Markdown links http://…, www.… and a@b.c even with every character escaped."""
    from phenoforge.dashboard.markdown import plain
    from tests.dashboard.conftest import shown

    escaped = plain("see http://e.x, www.e.x or a@e.x")
    assert "http:" not in escaped and "www." not in escaped and "a@" not in escaped
    assert shown(escaped) == "see http://e.x, www.e.x or a@e.x"
