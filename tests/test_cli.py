"""The command line on the fixture vocabulary (placed where ``connect()`` looks, so it is never rebuilt)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from phenoforge.cli import main
from phenoforge.config import libraries_dir, vocab_db_path
from phenoforge.engine import vocab_build
from tests.fixture_library import write_icd_library

COHORTS = {
    "dm2": ("Type 2 diabetes mellitus", ["E11"], True),
    "hf": ("Heart failure", ["I50.9", "I50.21"], False),
    "asthma": ("Asthma", ["J45", "J45.909"], False),
}


def write_fixture_library(dest: Path, library_id: str = "cli-lib") -> Path:
    return write_icd_library(
        dest, COHORTS, library_id, name="CLI fixture library", description="three cohorts over the fixture vocabulary"
    )


@pytest.fixture(autouse=True)
def fixture_vocabulary(monkeypatch: pytest.MonkeyPatch, fixture_db_path: Path) -> Path:
    """A copy of the fixture vocabulary at the default path; the real tree reader must never run."""

    def no_build(progress=None):  # noqa: ANN001, ANN202
        raise AssertionError("the CLI tried to rebuild a fixture-source vocabulary")

    monkeypatch.setattr(vocab_build, "icd10cm_rows", no_build)
    return Path(shutil.copyfile(fixture_db_path, vocab_db_path()))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- lookup ------------------------------------------------------------------------------------------


def test_lookup_known_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "lookup", "e1121")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("E11.21  Type 2 diabetes mellitus with diabetic nephropathy")
    assert "billable" in lines[0]
    assert "ancestors: 4 > E08-E13 > E11 > E11.2" in out
    assert "descendants: 0" in out


def test_lookup_category_lists_descendants(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "lookup", "S72.00")
    assert code == 0
    assert "descendants: 3 (S72.001, S72.001A, S72.001D)" in out


def test_lookup_unknown_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "lookup", "Q99.999")
    assert code == 1
    assert out == ""
    assert "'Q99.999' is not an ICD-10-CM code" in err
    assert "Traceback" not in err


# --- search ------------------------------------------------------------------------------------------


def test_search_bm25(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "search", "Kimmelstiel-Wilson", "--method", "bm25")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "== bm25"
    assert lines[1].split()[:2] == ["1", "E11.21"]


def test_search_spells_out_an_abbreviation_the_vocabulary_does_not_use(capsys: pytest.CaptureFixture[str]) -> None:
    """No ICD-10-CM text says "CHF": searched as typed it matched nothing about heart failure."""
    code, out, err = run(capsys, "search", "adults with CHF", "--method", "bm25", "-k", "3")
    assert code == 0
    assert "note: CHF is not a word ICD-10-CM uses; searched as 'congestive heart failure'" in err
    hits = [line.split()[1] for line in out.splitlines()[1:]]
    assert len(hits) == 3 and all(hit.startswith("I50") for hit in hits)
    code, out, err = run(capsys, "search", "chf", "--method", "bm25")  # lower case: a word, searched as typed
    assert "note:" not in err


@pytest.mark.parametrize("typed", ["I50.9", " i509 "])
def test_search_for_a_code_says_what_the_code_is(capsys: pytest.CaptureFixture[str], typed: str) -> None:
    """A code typed into search ranks descriptions by its digits as words: the note says what it is instead."""
    code, out, err = run(capsys, "search", typed, "--method", "bm25", "-k", "3")
    assert code == 0 and out.startswith("== bm25")
    assert (
        "note: I50.9 is the code of 'Heart failure, unspecified'; the rankings match description words, not codes: "
        "`python -m phenoforge lookup I50.9` shows it" in err
    )


def test_search_for_words_has_no_code_note(capsys: pytest.CaptureFixture[str]) -> None:
    for query in ("heart failure", "Z99.99999", "type 2"):
        code, _out, err = run(capsys, "search", query, "--method", "bm25", "-k", "3")
        assert code == 0 and "is the code of" not in err


def test_search_bm25_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "search", "heart failure", "--method", "bm25", "-k", "3", "--json")
    assert code == 0
    data = json.loads(out)
    assert list(data) == ["bm25"]
    assert len(data["bm25"]["hits"]) == 3
    assert data["bm25"]["hits"][0]["code"].startswith("I50")


@pytest.mark.parametrize(
    ("query", "reason"),
    [("   ", "empty"), ("'; DROP TABLE concept; --", "SQL"), ("糖尿病", "English"), ("x" * 10_000, "500")],
)
def test_search_bad_query_prints_the_reason(capsys: pytest.CaptureFixture[str], query: str, reason: str) -> None:
    code, out, err = run(capsys, "search", query, "--method", "bm25")
    assert code == 0
    assert "no results:" in out and reason in out
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("query", "reason"),
    [("   ", "empty"), ("'; DROP TABLE concept; --", "SQL"), ("糖尿病", "English"), ("x" * 10_000, "500")],
)
def test_a_set_builder_gives_the_same_reason_for_a_bad_query(
    capsys: pytest.CaptureFixture[str], query: str, reason: str
) -> None:
    code, out, err = run(capsys, "search", query, "--method", "subtree")
    assert code == 0
    assert "0 billable codes" in out and "no results:" in out and reason in out
    assert "no retriever returned" not in out and "Traceback" not in err


def test_a_set_builder_search_says_it_ignores_the_dense_weight(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "search", "asthma", "--method", "adaptive_cutoff", "--dense-weight", "0.9")
    assert code == 0 and "J45" in out
    assert "dense weight 0.5" in out and "--dense-weight 0.9" in out
    _code, out, _err = run(capsys, "search", "asthma", "--method", "adaptive_cutoff")
    assert "dense weight" not in out


def test_a_set_builder_search_spells_out_an_abbreviation_too(capsys: pytest.CaptureFixture[str]) -> None:
    """`search --method <set builder> "CHF"` used to search "CHF" as typed and miss heart failure."""
    code, out, err = run(capsys, "search", "CHF", "--method", "adaptive_cutoff")
    assert code == 0
    assert "note: CHF is not a word ICD-10-CM uses; searched as 'congestive heart failure'" in err
    codes = [line.split()[0] for line in out.splitlines()[1:] if line.startswith("  ") and not line.startswith("   ")]
    assert codes and all(code.startswith("I50") for code in codes)


def test_search_hybrid_without_dense_says_it_is_bm25_only(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "search", "asthma", "--method", "hybrid")
    assert code == 0
    assert "(BM25 only: no dense index)" in out
    assert "J45" in out
    assert "dense index is not built" in err


def test_search_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["search", "asthma", "-k", "0"],
        ["search", "asthma", "--dense-weight", "1.5"],
        ["search", "asthma", "--method", "tfidf"],
    ):
        with pytest.raises(SystemExit) as error:
            main(argv)
        assert error.value.code == 2
    assert "usage" in capsys.readouterr().err


# --- benchmark ---------------------------------------------------------------------------------------


def test_benchmark_json_on_a_library_given_by_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    library = write_fixture_library(tmp_path / "elsewhere" / "my-lib")
    code, out, _err = run(capsys, "benchmark", "--library", str(library), "--no-dense", "--json")
    assert code == 0
    data = json.loads(out)
    assert list(data) == ["cli-lib"]
    report = data["cli-lib"]
    # the default runs the reference's methods and the set builders (dense is switched off)
    expected_methods = {
        "bm25",
        "hybrid",
        "expand_descendants",
        "adaptive_cutoff",
        "subtree",
        "learned",
        "curated_transfer",
    }
    assert set(report["mean_hierarchical_score_by_method"]) == expected_methods
    assert set(report["mean_coverage_by_method"]) == expected_methods
    assert {(r["cohort_id"], r["method"]) for r in report["results"]} == {
        (cid, m) for cid in COHORTS for m in expected_methods
    }
    assert sorted(report["skipped"]) == sorted(
        f"{cid}/dense: no dense retriever (switched off (--no-dense))" for cid in COHORTS
    )
    assert report["methods"]["hybrid"]["degraded"] == "no dense retriever (switched off (--no-dense))"
    # no bundled library is installed here: the builders say they run untuned, learned that it has no model
    learned = report["methods"]["learned"]
    assert learned["trained_on"] == [] and "no membership model" in learned["degraded"]
    assert "untuned" in report["methods"]["subtree"]["degraded"]
    dm2 = next(r for r in report["results"] if r["cohort_id"] == "dm2" and r["method"] == "expand_descendants")
    assert dm2["coverage"] == 1.0 and dm2["over_inclusion_penalty"] == 0.0


def test_benchmark_json_is_the_dump_of_every_report_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each library's JSON is made as soon as it is scored (no report object is kept): the output must
    stay exactly ``json.dumps({id: report, ...}, indent=1)``."""
    from phenoforge.engine.curated import load_library
    from phenoforge.eval.harness import run_benchmark

    first = write_fixture_library(tmp_path / "a" / "lib-a", "lib-a")
    second = write_fixture_library(tmp_path / "b" / "lib-b", "lib-b")
    argv = ["--methods", "bm25", "expand_descendants", "--no-dense", "--json"]
    code, out, _err = run(capsys, "benchmark", "--library", str(first), "--library", str(second), *argv)
    assert code == 0
    from phenoforge.engine.db import connect

    con = connect()
    expected = {
        path.name: run_benchmark(
            con, path, load_library(path).cohort_ids, methods=["bm25", "expand_descendants"]
        ).model_dump()
        for path in (first, second)
    }
    assert out == json.dumps(expected, indent=1) + "\n" and list(json.loads(out)) == ["lib-a", "lib-b"]


def test_benchmark_json_uses_the_installed_library_by_id(capsys: pytest.CaptureFixture[str]) -> None:
    write_fixture_library(libraries_dir() / "cli-lib")
    code, out, _err = run(
        capsys, "benchmark", "--library", "cli-lib", "--methods", "bm25", "--cohorts", "hf", "-k", "2", "--json"
    )
    assert code == 0
    report = json.loads(out)["cli-lib"]
    (result,) = report["results"]
    assert result["cohort_id"] == "hf" and result["method"] == "bm25"
    assert len(result["predicted_codes"]) == 2


def test_benchmark_checks_cohorts_against_every_library_before_scoring_any(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The second library lacking a cohort was an error only after the first library had been scored."""
    first = write_fixture_library(tmp_path / "a" / "lib-a", "lib-a")
    second = write_icd_library(tmp_path / "b" / "lib-b", {"dm2": COHORTS["dm2"]}, "lib-b")
    argv = ["benchmark", "--library", str(first), "--library", str(second), "--methods", "bm25", "--no-dense"]
    code, out, err = run(capsys, *argv, "--cohorts", "hf", "dm2", "asthma")
    assert code == 2 and out == ""  # nothing scored, nothing printed
    assert err == ("error: --cohorts applies to every library given: cohort(s) 'hf', 'asthma' not in library 'lib-b'\n")
    code, out, _err = run(capsys, *argv, "--cohorts", "dm2", "dm2", "--quiet")  # named twice: scored once
    assert code == 0
    assert out.count(": 1 cohorts, k=25") == 2 and out.count("bm25                       1 ") == 2


def test_benchmark_table_names_the_cohorts_a_set_builder_answered_with_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An empty answer scores zero; the table must say which cohort and why, not only lower the mean."""
    cohorts = {**COHORTS, "void": ("Qqxzv wrrpt", ["I50.9"], False), "sql": ("DROP TABLE concept; --", ["E11"], True)}
    write_icd_library(libraries_dir() / "cli-lib", cohorts, "cli-lib")
    code, out, _err = run(capsys, "benchmark", "--library", "cli-lib", "--methods", "subtree", "--no-dense", "--quiet")
    assert code == 0
    empty = next(line for line in out.splitlines() if "no codes" in line)
    assert "subtree" in empty and "2 of 5" in empty, out
    assert "void: no candidates" in out and "sql: no results: the query looks like SQL" in out
    assert "dm2:" not in out


def test_benchmark_table(capsys: pytest.CaptureFixture[str]) -> None:
    write_fixture_library(libraries_dir() / "cli-lib")
    code, out, _err = run(capsys, "benchmark", "--library", "cli-lib", "--no-dense", "--quiet")
    assert code == 0
    assert "CLI fixture library (cli-lib): 3 cohorts, k=25" in out
    header = next(line for line in out.splitlines() if line.startswith("method"))
    # column heads are the measures' own labels, with their direction
    assert header.split() == [
        "method",
        "cohorts",
        "Coverage",
        "↑",
        "Over-inclusion",
        "↓",
        "Hierarchical",
        "score",
        "↑",
        "Exact-match",
        "F1",
        "↑",
    ]
    rows = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line.split() and line.split()[0] in ("bm25", "hybrid", "expand_descendants", "dense")
    }
    assert set(rows) == {"bm25", "hybrid", "expand_descendants"}
    assert all(row[1] == "3" for row in rows.values())
    assert all(0.0 <= float(value) <= 1.0 for row in rows.values() for value in row[2:6])
    assert "skipped: 3" in out


@pytest.mark.parametrize(
    "argv", [["benchmark", "--library", "nope"], ["benchmark", "--library", "nope", "--json", "--no-dense"]]
)
def test_benchmark_unknown_library_is_a_one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    write_fixture_library(libraries_dir() / "cli-lib")
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("note:")]
    assert lines == ["error: no library 'nope' (installed: cli-lib)"]


def test_benchmark_with_no_library_installed(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run(capsys, "benchmark", "--no-dense")
    assert code == 2
    assert "no cohort library is installed" in err and "Traceback" not in err


def test_benchmark_unknown_cohort_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    write_fixture_library(libraries_dir() / "cli-lib")
    code, _out, err = run(capsys, "benchmark", "--library", "cli-lib", "--no-dense", "--cohorts", "zzz", "--quiet")
    assert code == 2
    assert "'zzz'" in err and "Traceback" not in err


# --- build -------------------------------------------------------------------------------------------


def test_build_keeps_a_fixture_vocabulary(capsys: pytest.CaptureFixture[str]) -> None:
    before = vocab_db_path().read_bytes()
    code, out, _err = run(capsys, "build", "--skip-libraries", "--no-dense", "--quiet")
    assert code == 0
    assert "vocabulary: phenoforge test fixture" in out
    assert vocab_db_path().read_bytes() == before


def test_sweep_without_dense_says_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    write_fixture_library(libraries_dir() / "cli-lib")
    code, _out, err = run(capsys, "sweep", "--quiet")
    assert code == 1
    assert "needs the dense index" in err


def test_a_broken_installed_library_does_not_block_one_given_by_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = libraries_dir() / "broken"
    broken.mkdir(parents=True)
    (broken / "manifest.json").write_text("{not json")
    library = write_fixture_library(tmp_path / "elsewhere" / "good-lib")
    code, out, err = run(capsys, "benchmark", "--library", str(library), "--no-dense", "--json")
    assert code == 0, err
    assert list(json.loads(out)) == ["cli-lib"]


def test_a_broken_installed_library_is_named_and_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 12 item 7: the full benchmark reports the broken library and runs the others."""
    broken = libraries_dir() / "broken"
    broken.mkdir(parents=True)
    (broken / "manifest.json").write_text("{not json")
    write_fixture_library(libraries_dir() / "elixhauser")  # where `build` puts a bundled library
    code, out, err = run(capsys, "benchmark", "--no-dense", "--quiet", "--json")
    assert code == 0, err
    assert list(json.loads(out)) == ["cli-lib"]
    assert "skipped a broken library" in err and str(broken / "manifest.json") in err and "Traceback" not in err


def test_only_broken_libraries_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    broken = libraries_dir() / "broken"
    broken.mkdir(parents=True)
    (broken / "manifest.json").write_text("{not json")
    code, _out, err = run(capsys, "benchmark", "--no-dense", "--quiet")
    assert code == 2
    assert str(broken / "manifest.json") in err and "Traceback" not in err


def test_build_on_a_bf16_index_says_so_once_and_keeps_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # precision="auto" is ONNX fp32 now; an index built in bf16 before stays ready, and build said nothing of it
    import json

    from phenoforge.engine.db import connect
    from phenoforge.engine.dense import ensure_dense_index
    from phenoforge.engine.dense import retriever as dense_retriever
    from tests.engine.fake_embedder import FakeEmbedder

    monkeypatch.setattr(dense_retriever, "default_embed_fn", FakeEmbedder)  # the set builders' fit embeds too

    con = connect()
    retriever = ensure_dense_index(con, embed_fn=FakeEmbedder())
    manifest_path = retriever.index_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["runtime"] = "torch-bf16"
    manifest_path.write_text(json.dumps(manifest))
    con.close()
    code, out, err = run(capsys, "build", "--quiet")
    assert code == 0
    assert "dense index: ready" in out and "torch-bf16" in out
    notes = [line for line in (out + err).splitlines() if "embedded in torch-bf16" in line]
    assert len(notes) == 1 and "build --force" in notes[0]  # said once, with the command that rebuilds
    assert json.loads(manifest_path.read_text())["built_at"] == manifest["built_at"]  # kept, not rebuilt
