"""Fetching Phenotype Library cohorts: over HTTP (mock transport only) or from a local copy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from phenoforge.athena.ohdsi import (
    DEFAULT_COHORT_IDS,
    PINNED_TAG,
    display_name,
    fetch_ohdsi_library,
    normalise_cohort_id,
)
from phenoforge.config import libraries_dir
from phenoforge.engine.curated import load_library
from phenoforge.errors import LibraryError
from tests.athena.athena_fixture import (
    FIXTURE_COHORTS,
    cohorts_csv_text,
    heart_failure_cohort,
    write_phenotype_clone,
)

RAW = f"https://raw.githubusercontent.com/OHDSI/PhenotypeLibrary/{PINNED_TAG}/inst/"


class FakeGitHub:
    """A mock transport serving raw files; records every URL asked for."""

    def __init__(self, files: dict[str, str | int | Exception]) -> None:
        self.files = files
        self.requested: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        self.requested.append(url)
        served = self.files.get(url, 404)
        if isinstance(served, Exception):
            raise served
        if isinstance(served, int):
            return httpx.Response(served, text="nope")
        return httpx.Response(200, text=served)

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))


def fixture_files(
    extra: dict[str, str | int | Exception] | None = None, csv_rows: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    files: dict[str, Any] = {RAW + "Cohorts.csv": cohorts_csv_text(csv_rows)}
    for cohort_id, (_name, build) in FIXTURE_COHORTS.items():
        files[RAW + f"cohorts/{cohort_id}.json"] = json.dumps(build())
    files.update(extra or {})
    return files


def test_fetch_over_http_at_the_pinned_tag(tmp_path: Path) -> None:
    github = FakeGitHub(fixture_files())
    dest = tmp_path / "ohdsi"
    manifest = fetch_ohdsi_library(dest, ids=["9288", "9519", "9521"], client=github.client())
    assert github.requested == [RAW + "Cohorts.csv"] + [
        RAW + f"cohorts/{cohort_id}.json" for cohort_id in ("9288", "9519", "9521")
    ]
    assert manifest.citation.version == PINNED_TAG
    assert manifest.citation.url == f"https://github.com/OHDSI/PhenotypeLibrary/tree/{PINNED_TAG}"
    assert manifest.library_id == "ohdsi-phenotype-library-3.37.0"
    library = load_library(dest)
    assert library.cohort_ids == ["9288", "9519", "9521"]
    assert library.cohort("9519").cohort_name == "Heart failure"
    assert library.cohort("9288").cohort_name == (
        "Type 2 Diabetes Mellitus indexed on diagnosis, treatment or lab results"
    )
    assert library.definition("9519") == heart_failure_cohort()
    assert manifest.report["original_names"]["9519"] == "[P][R] Heart failure"
    assert manifest.report["failures"] == {}
    assert manifest.stats.n_cohorts == 3
    assert manifest.report["listed_concepts_by_vocabulary"] == {"ATC": 1, "LOINC": 1, "SNOMED": 10}


def test_defaults_to_the_23_decomposition_cohorts(tmp_path: Path) -> None:
    rows = [
        {
            "cohortId": cohort_id,
            "cohortName": f"[P][R] Condition {cohort_id}",
            "cohortNameLong": "",
            "status": "",
            "logicDescription": "",
            "hashTag": "",
            "recommendedReferentConceptIds": "",
        }
        for cohort_id in DEFAULT_COHORT_IDS
    ]
    files = fixture_files(csv_rows=rows)
    for cohort_id in DEFAULT_COHORT_IDS:
        files[RAW + f"cohorts/{cohort_id}.json"] = json.dumps(heart_failure_cohort())
    github = FakeGitHub(files)
    manifest = fetch_ohdsi_library(tmp_path / "ohdsi", client=github.client())
    assert len(DEFAULT_COHORT_IDS) == 23
    assert [entry.cohort_id for entry in manifest.cohorts] == list(DEFAULT_COHORT_IDS)
    assert manifest.cohorts[0].cohort_name == "Condition 503"
    assert not any("9288" in url for url in github.requested)


def test_all_takes_every_listed_cohort(tmp_path: Path) -> None:
    manifest = fetch_ohdsi_library(tmp_path / "ohdsi", all_=True, client=FakeGitHub(fixture_files()).client())
    assert [entry.cohort_id for entry in manifest.cohorts] == ["9288", "9519", "9521"]


def test_failures_are_reported_per_cohort(tmp_path: Path) -> None:
    rows = [
        {
            "cohortId": cohort_id,
            "cohortName": f"[P] Broken {cohort_id}",
            "cohortNameLong": "",
            "status": "",
            "logicDescription": "",
            "hashTag": "",
            "recommendedReferentConceptIds": "",
        }
        for cohort_id in ("1", "2", "3", "4", "5")
    ]
    no_entry = heart_failure_cohort()
    no_entry["PrimaryCriteria"]["CriteriaList"] = []
    files = fixture_files(
        csv_rows=rows,
        extra={
            RAW + "cohorts/2.json": "{not json",
            RAW + "cohorts/3.json": json.dumps(no_entry),
            RAW + "cohorts/4.json": json.dumps({"ConceptSets": "nope"}),
            RAW + "cohorts/5.json": httpx.ConnectError("connection refused"),
        },
    )
    manifest = fetch_ohdsi_library(
        tmp_path / "ohdsi",
        ids=["9519", "1", "2", "3", "4", "5", "777", "x1"],
        client=FakeGitHub(files).client(),
    )
    assert [entry.cohort_id for entry in manifest.cohorts] == ["9519"]
    failures = manifest.report["failures"]
    assert set(failures) == {"1", "2", "3", "4", "5", "777", "x1"}
    assert "HTTP 404" in failures["1"]
    assert "not valid JSON" in failures["2"]
    assert "no concept set is referenced by PrimaryCriteria" in failures["3"]
    assert "'ConceptSets' is missing or not a list" in failures["4"]
    assert "ConnectError" in failures["5"]
    assert "not listed in Cohorts.csv" in failures["777"]
    assert "not an OHDSI cohort id" in failures["x1"]
    assert load_library(tmp_path / "ohdsi").cohort_ids == ["9519"]


def test_nothing_fetched_writes_nothing_and_keeps_the_old_library(tmp_path: Path) -> None:
    dest = tmp_path / "ohdsi"
    fetch_ohdsi_library(dest, ids=["9519"], client=FakeGitHub(fixture_files()).client())
    broken = fixture_files(extra={RAW + "cohorts/9521.json": 500})
    with pytest.raises(LibraryError, match="no OHDSI cohort could be fetched.*HTTP 500"):
        fetch_ohdsi_library(dest, ids=["9521"], client=FakeGitHub(broken).client(), overwrite=True)
    assert load_library(dest).cohort_ids == ["9519"]
    assert sorted(path.name for path in tmp_path.iterdir() if path.name != "data") == [
        "ohdsi"
    ]  # data: the test data dir


@pytest.mark.parametrize(
    ("served", "message"),
    [
        (404, "Cohorts.csv: not found"),
        (503, "HTTP 503"),
        (httpx.ConnectTimeout("timed out"), "request failed"),
        ("id,name\n1,x\n", "cohortId and cohortName"),
    ],
)
def test_index_failure_writes_nothing(tmp_path: Path, served: Any, message: str) -> None:
    files = fixture_files(extra={RAW + "Cohorts.csv": served})
    with pytest.raises(LibraryError, match=message):
        fetch_ohdsi_library(tmp_path / "ohdsi", client=FakeGitHub(files).client())
    assert not (tmp_path / "ohdsi").exists()


def test_other_tag(tmp_path: Path) -> None:
    raw = "https://raw.githubusercontent.com/OHDSI/PhenotypeLibrary/v3.36.0/inst/"
    files = {url.replace(RAW, raw): text for url, text in fixture_files().items()}
    manifest = fetch_ohdsi_library(
        tmp_path / "ohdsi", ids=["9519"], release_tag="v3.36.0", client=FakeGitHub(files).client()
    )
    assert manifest.citation.version == "v3.36.0"


@pytest.mark.parametrize("layout", ["clone", "package", "cohorts-folder"])
def test_fetch_from_a_local_copy(tmp_path: Path, layout: str) -> None:
    root = write_phenotype_clone(tmp_path / "copy", "clone" if layout == "clone" else "package")
    source = root / "cohorts" if layout == "cohorts-folder" else root
    manifest = fetch_ohdsi_library(tmp_path / "ohdsi", ids=[9288, "9519"], from_dir=source)
    assert [entry.cohort_id for entry in manifest.cohorts] == ["9288", "9519"]
    assert manifest.citation.version == "3.37.0"  # from DESCRIPTION
    assert manifest.citation.url is None
    assert load_library(tmp_path / "ohdsi").definition("9519") == heart_failure_cohort()


def test_a_folder_that_is_not_a_copy(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(LibraryError, match="no Cohorts.csv beside a cohorts/ folder"):
        fetch_ohdsi_library(tmp_path / "ohdsi", from_dir=tmp_path / "empty")
    with pytest.raises(LibraryError, match="not a directory"):
        fetch_ohdsi_library(tmp_path / "ohdsi", from_dir=tmp_path / "missing")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("[P][R] Heart failure", "Heart failure"),
        ("[P] First Inflammatory Bowel Disease", "First Inflammatory Bowel Disease"),
        ("[D] [W] Old cohort", "Old cohort"),
        ("Plain name [not a tag]", "Plain name [not a tag]"),
    ],
)
def test_display_name(raw: str, expected: str) -> None:
    assert display_name(raw) == expected


def test_display_name_fallbacks() -> None:
    assert display_name("[P]", "Long name") == "Long name"
    assert display_name("", None, "42") == "OHDSI cohort 42"


def test_normalise_cohort_id() -> None:
    assert [normalise_cohort_id(v) for v in (40, " 40 ", "40.0", "007")] == ["40"] * 3 + ["7"]
    with pytest.raises(ValueError, match="not an OHDSI cohort id"):
        normalise_cohort_id("40a")


def test_cli_fetch_from_a_local_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from phenoforge.cli import main

    root = write_phenotype_clone(tmp_path / "clone")
    code = main(["library", "fetch-ohdsi", "--from", str(root), "--ids", "9288,9519", "9521", "--quiet"])
    assert code == 0
    assert "3 cohorts" in capsys.readouterr().out
    assert load_library(libraries_dir() / "ohdsi").cohort_ids == ["9288", "9519", "9521"]


def test_cli_reports_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from phenoforge.cli import main

    root = write_phenotype_clone(tmp_path / "clone")
    code = main(["library", "fetch-ohdsi", "--from", str(root), "--ids", "9519", "12345", "--quiet"])
    assert code == 0
    assert "failed 12345: not listed in Cohorts.csv" in capsys.readouterr().err
    assert main(["library", "fetch-ohdsi", "--from", str(root), "--ids", "12345", "--quiet"]) == 2
