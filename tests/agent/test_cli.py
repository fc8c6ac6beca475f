"""``assemble`` and ``decompose-eval`` through ``python -m phenoforge``'s entry point."""

from __future__ import annotations

import builtins
import csv
import json
import re
from pathlib import Path

import pytest

from phenoforge.agent import audit
from phenoforge.cli import agent as agent_cli
from phenoforge.cli import main
from phenoforge.eval import decomposition
from phenoforge.eval.decomposition import DecompositionTestCase

DESCRIPTION = "adults with asthma or a femur fracture"


@pytest.fixture(autouse=True)
def _fixture_vocabulary(monkeypatch: pytest.MonkeyPatch, fixture_con) -> None:
    monkeypatch.setattr(agent_cli, "_connect", lambda: fixture_con)


def scripted(monkeypatch: pytest.MonkeyPatch, answers: list[str]) -> list[str]:
    prompts: list[str] = []

    def fake_input(prompt: str = "") -> str:
        prompts.append(prompt)
        if not answers:
            raise EOFError
        return answers.pop(0)

    monkeypatch.setattr(builtins, "input", fake_input)
    return prompts


def test_assemble_yes_writes_exports(tmp_path: Path, fixture_library: Path, capsys) -> None:
    out_csv, out_circe = tmp_path / "set.csv", tmp_path / "set.json"
    code = main(
        [
            "assemble",
            DESCRIPTION,
            "--reviewer",
            "ann",
            "--yes",
            "--library",
            str(fixture_library),
            "--csv",
            str(out_csv),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "1. fixlib/fix-ASTHMA Asthma" in printed and "concept set:" in printed
    assert "ann confirmed fixlib/fix-ASTHMA for 'asthma' (--yes)" in printed
    assert "apply these in the cohort's other criteria" in printed and "- age or sex: adults" in printed
    rows = list(csv.DictReader(out_csv.open()))
    assert {row["tier"] for row in rows} == {"curated", "generated", "qualifier"}
    assert {row["reviewer"] for row in rows} == {"ann"}
    assert not out_circe.exists()
    session = audit.list_sessions()[0]
    assert session.stage == "assembled" and session.n_decisions > 0
    trail = audit.decisions(session.session_id)
    assert [(r.decision, r.terms) for r in trail[:2]] == [
        ("qualifier", "age or sex: adults"),
        ("confirm-cohort", "asthma"),
    ]
    assert all(record.decision == "accept" and record.reviewer == "ann" for record in trail[2:])


def test_assemble_json_keeps_stdout_json(tmp_path: Path, fixture_library: Path, capsys) -> None:
    """``--json`` is for a pipe: stdout is the concept set's JSON alone, what the reviewer reads goes to stderr."""
    out_csv = tmp_path / "set.csv"
    args = ["assemble", DESCRIPTION, "--reviewer", "ann", "--yes", "--library", str(fixture_library)]
    assert main([*args, "--json", "--csv", str(out_csv)]) == 0
    captured = capsys.readouterr()
    concept_set = json.loads(captured.out)  # was: the session's terms, then JSON, then "session ... saved"
    session = audit.list_sessions()[0]
    assert concept_set == json.loads(audit.load_state(session.session_id).concept_set.model_dump_json())
    assert any(entry["code"] == "J45" for entry in concept_set["entries"])
    assert "confirmed fixlib/fix-ASTHMA" in captured.err and "concept set:" in captured.err
    assert f"wrote {out_csv}" in captured.err and f"session {session.session_id} saved" in captured.err


def test_assemble_json_prompts_on_stderr(monkeypatch, fixture_library: Path, capsys) -> None:
    prompts = scripted(monkeypatch, ["", "A"])  # Enter confirms the proposed cohort, A accepts the rest
    assert main(["assemble", DESCRIPTION, "--reviewer", "bob", "--library", str(fixture_library), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["entries"]  # the JSON alone, after an interactive review
    assert prompts == ["", ""] and agent_cli.PROMPT in captured.err  # the prompt itself was written to stderr


@pytest.mark.parametrize("command", [["assemble", DESCRIPTION, "--reviewer", "ann", "--yes"], ["decompose-eval"]])
@pytest.mark.parametrize("k", ["0", "-3", "ten"])
def test_k_must_be_positive_before_any_work(command: list[str], k: str, capsys) -> None:
    """--k 0 ran: assemble saved a session of "unmappable: retrieval found nothing", decompose-eval printed zeros."""
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--k", k])
    assert exit_info.value.code == 2
    assert f"argument --k: k must be a positive integer, got {k!r}" in capsys.readouterr().err
    assert audit.list_sessions() == []


def test_interactive_review_handles_bad_input(monkeypatch, fixture_library: Path, capsys) -> None:
    prompts = scripted(monkeypatch, ["", "what?", "e", "r", "R"])
    assert main(["assemble", DESCRIPTION, "--reviewer", "bob", "--library", str(fixture_library)]) == 0
    printed = capsys.readouterr().out
    assert "'what?' is not an answer" in printed
    assert len(prompts) == 5
    session = audit.list_sessions()[0]
    trail = [r for r in audit.decisions(session.session_id) if r.decision in ("accept", "reject")]
    first = audit.load_state(session.session_id).candidate(trail[0].code)
    assert trail[0].decision == "accept" and trail[0].expand_descendants == (first.n_descendants > 0)
    assert first.expand_descendants == (first.n_descendants > 0)
    assert trail[1].decision == "reject"
    assert all(record.decision == "reject" for record in trail[2:]) and len(trail) > 2
    assert session.stage == "assembled"


def test_end_of_input_saves_and_resume_finishes(monkeypatch, fixture_library: Path, capsys) -> None:
    scripted(monkeypatch, ["", "a"])
    assert main(["assemble", DESCRIPTION, "--reviewer", "bob", "--library", str(fixture_library)]) == 0
    assert "end of input: progress saved" in capsys.readouterr().out
    session = audit.list_sessions()[0]
    assert session.stage == "confirming" and session.n_decisions == 3  # a qualifier, the cohort, one code
    assert main(["assemble", "--resume", session.session_id, "--reviewer", "bob", "--no-input"]) == 0
    final = audit.load_state(session.session_id)
    assert final.stage == "assembled" and not final.pending
    assert main(["assemble", "--audit", session.session_id]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-len(audit.decisions(session.session_id)) - 1].startswith("decision_id,")


def test_reviewer_required_for_scripts(fixture_library: Path, capsys) -> None:
    code = main(["assemble", DESCRIPTION, "--no-input", "--library", str(fixture_library)])
    assert code == 2 and "--reviewer" in capsys.readouterr().err


def test_flags_contradict(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["assemble", "x", "--yes", "--no-input"])


def test_decompose_eval_json_and_table(monkeypatch, fixture_library: Path, capsys) -> None:
    cases = [
        DecompositionTestCase(
            population_description="adults with asthma", cohort_id="fix-ASTHMA", source="test", library_id="fixlib"
        )
    ]
    monkeypatch.setitem(decomposition.CASE_SETS, "default", cases)
    assert main(["decompose-eval", "--library", str(fixture_library), "--json", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n_scored"] == 1 and report["results"][0]["term_resolutions"][0]["landed"] == "target"
    assert main(["decompose-eval", "--library", str(fixture_library), "--quiet"]) == 0
    table = capsys.readouterr().out
    assert "asthma -> target fix-ASTHMA" in table and "mean gap" in table
    assert main(["decompose-eval", "--library", str(fixture_library), "--quiet", "--repeat", "2"]) == 0
    assert "2 runs" in capsys.readouterr().out


def test_decompose_eval_claude_without_key(monkeypatch, fixture_library: Path, capsys, tmp_path) -> None:
    from phenoforge.agent import claude

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setattr(claude, "_secrets_paths", lambda: [tmp_path / "missing.toml"])
    assert main(["decompose-eval", "--decomposer", "claude", "--quiet"]) == 2
    assert "ANTHROPIC_API_KEY" in capsys.readouterr().err


def test_ambiguous_term_can_be_settled_interactively(monkeypatch, fixture_library: Path, capsys) -> None:
    scripted(monkeypatch, ["7", "2"])
    assert (
        main(["assemble", "patients with atrial fibrillation", "--reviewer", "cy", "--library", str(fixture_library)])
        == 0
    )
    printed = capsys.readouterr().out
    assert "'7' is not a choice" in printed and "2 curated cohorts proposed, best-fitting scope first" in printed
    state = audit.load_state(audit.list_sessions()[0].session_id)
    second = state.terms[0].proposals[1]
    assert state.terms[0].status == "curated" and state.terms[0].curated.key == second.key
    assert f"replaced the proposed {state.terms[0].proposals[0].key}" in printed
    assert state.stage == "assembled" and {e.source for e in state.concept_set.entries} == {second.key}
    trail = audit.decisions(state.session_id)
    assert [(r.code, r.decision, r.reviewer) for r in trail] == [(second.key, "replace-cohort", "cy")]


def test_the_cli_refuses_to_export_without_a_reviewer_and_prints_the_qualifiers(
    tmp_path: Path, fixture_library: Path, capsys
) -> None:
    out_csv = tmp_path / "set.csv"
    args = ["assemble", "adults hospitalized with asthma", "--library", str(fixture_library), "--csv", str(out_csv)]
    assert main([*args, "--yes"]) == 2
    captured = capsys.readouterr()
    assert "a reviewer name is required" in captured.err and "--reviewer NAME" in captured.err
    assert "- age or sex: adults" in captured.out and "- setting: hospitalized" in captured.out
    assert not out_csv.exists()
    assert main([*args, "--yes", "--reviewer", "   "]) == 2  # only spaces: refused before any work
    assert "only spaces" in capsys.readouterr().err and not out_csv.exists()
    assert main([*args, "--yes", "--reviewer", "dee", "--reason", "protocol v2"]) == 0
    rows = list(csv.DictReader(out_csv.open()))
    assert {row["reason"] for row in rows if row["tier"] == "curated"} == {"no prompt (--yes): protocol v2"}
    assert {r.reason for r in audit.decisions(audit.list_sessions()[0].session_id) if r.decision == "accept"} <= {
        "protocol v2"
    }
    assert [(r["tier"], r["terms"]) for r in rows if r["tier"] == "qualifier"] == [
        ("qualifier", "adults"),
        ("qualifier", "hospitalized"),
    ]


def test_declining_a_proposal_gives_generated_candidates(monkeypatch, fixture_library: Path, capsys) -> None:
    scripted(monkeypatch, ["g", "A"])
    assert main(["assemble", "asthma", "--reviewer", "eve", "--library", str(fixture_library)]) == 0
    state = audit.load_state(audit.list_sessions()[0].session_id)
    assert state.terms[0].status == "generated" and state.candidates
    assert all(entry.tier == "generated" for entry in state.concept_set.entries)
    assert audit.decisions(state.session_id)[0].decision == "decline-cohorts"


ASTHMA_AND_HF = [
    DecompositionTestCase(
        population_description="adults with asthma", cohort_id="fix-ASTHMA", source="t", library_id="fixlib"
    ),
    DecompositionTestCase(
        population_description="adults with heart failure", cohort_id="fix-HF", source="t", library_id="fixlib"
    ),
]


def mock_claude(monkeypatch: pytest.MonkeyPatch, handler) -> list[dict]:
    """Route the CLI's real Claude client through a mock HTTP transport; returns the client's settings."""
    import anthropic
    import httpx2

    from phenoforge.agent import claude

    real = anthropic.Anthropic
    built: list[dict] = []

    def client(**kwargs):
        built.append(kwargs)
        return real(**kwargs, http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-KEY")
    monkeypatch.setattr(claude.anthropic, "Anthropic", client)
    return built


def test_decompose_eval_claude_all_failing_exits_non_zero(monkeypatch, fixture_library: Path, capsys) -> None:
    import httpx2

    monkeypatch.setitem(decomposition.CASE_SETS, "default", ASTHMA_AND_HF)
    built = mock_claude(
        monkeypatch,
        lambda request: httpx2.Response(
            401, json={"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
        ),
    )
    code = main(
        [
            "decompose-eval",
            "--decomposer",
            "claude",
            "--library",
            str(fixture_library),
            "--quiet",
            "--timeout",
            "7",
            "--budget",
            "60",
        ]
    )
    captured = capsys.readouterr()
    assert code == 1
    assert "0 of 2 cases ran: ClaudeAuthError: the Anthropic API rejected the API key (HTTP 401)" in captured.err
    assert "mean decomposed" not in captured.out and "0.0000" not in captured.out
    assert built[0]["timeout"] == 7.0
    assert "sk-ant-test-KEY" not in captured.out + captured.err


def test_decompose_eval_claude_partial_failure_is_labelled(monkeypatch, fixture_library: Path, capsys) -> None:
    import httpx2

    def handler(request: httpx2.Request) -> httpx2.Response:
        if "asthma" in json.loads(request.content)["messages"][0]["content"]:
            raise httpx2.ReadTimeout("timed out", request=request)
        return httpx2.Response(
            200,
            json={
                "id": "m",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-5",
                "content": [
                    {"type": "tool_use", "id": "t", "name": "record_conditions", "input": {"terms": ["heart failure"]}}
                ],
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            },
        )

    monkeypatch.setitem(decomposition.CASE_SETS, "default", ASTHMA_AND_HF)
    mock_claude(monkeypatch, handler)
    assert (
        main(
            [
                "decompose-eval",
                "--decomposer",
                "claude",
                "--library",
                str(fixture_library),
                "--quiet",
                "--repeat",
                "1",
                "--timeout",
                "2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "1 of 2 cases ran (1 failed: 1 ClaudeTimeoutError" in out
    assert "means are over the 1 that ran" in out
    assert "did not answer within" in out and "raise --timeout" in out


def test_decompose_eval_cases_file_and_split(monkeypatch, fixture_library: Path, tmp_path: Path, capsys) -> None:
    cases_file = tmp_path / "mine.csv"
    cases_file.write_text(
        "population_description,cohort_id,library,source\n"
        "children with asthma using inhaled steroids,fix-ASTHMA,fixlib,my trial\n",
        encoding="utf-8",
    )
    assert main(["decompose-eval", "--cases", str(cases_file), "--library", str(fixture_library), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "asthma -> target fix-ASTHMA" in out and "1 of 1 cases ran" in out
    cases_file.write_text("population_description,cohort_id\nadults with gout,fix-GOUT\n", encoding="utf-8")
    assert main(["decompose-eval", "--cases", str(cases_file), "--library", str(fixture_library), "--quiet"]) == 2
    assert "line 2: no installed library holds this cohort" in capsys.readouterr().err
    assert main(["decompose-eval", "--cases", str(cases_file), "--split", "dev", "--quiet"]) == 2
    assert "--split" in capsys.readouterr().err


def test_decompose_eval_against_a_hung_server_is_bounded_by_the_budget(
    monkeypatch, fixture_library: Path, capsys, hung_server, tmp_path: Path
) -> None:
    """A server that accepts the connection and never answers: the run ends at --budget, not per-attempt timeouts."""
    import time

    url, accepted = hung_server
    monkeypatch.setitem(decomposition.CASE_SETS, "default", ASTHMA_AND_HF)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-KEY")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
    monkeypatch.setenv("PHENOFORGE_DATA_DIR", str(tmp_path))  # an empty response cache
    started = time.monotonic()
    code = main(
        [
            "decompose-eval",
            "--decomposer",
            "claude",
            "--library",
            str(fixture_library),
            "--quiet",
            "--timeout",
            "30",
            "--budget",
            "1.5",
        ]
    )
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert accepted, "the client did connect"
    assert code == 1 and "0 of 2 cases ran: ClaudeTimeoutError" in err
    assert elapsed < 10.0, f"{elapsed:.1f} s against a 1.5 s budget (30 s per attempt would be minutes)"
    import argparse

    parser = argparse.ArgumentParser()
    agent_cli.register_cli(parser.add_subparsers())
    evaluate = parser._subparsers._group_actions[0].choices["decompose-eval"]  # type: ignore[union-attr]
    existing = {flag for action in evaluate._actions for flag in action.option_strings}
    named = set(re.findall(r"--[a-z][a-z-]*", err))
    assert named and named <= existing, f"the error names options that do not exist: {named - existing}"


def test_decompose_eval_claude_repeat_is_uncached_and_reports_spread(
    monkeypatch, fixture_library: Path, capsys, tmp_path: Path
) -> None:
    import itertools

    import httpx2

    answers = itertools.cycle([["asthma"], ["fracture of femur"]])
    calls: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        calls.append(json.loads(request.content)["messages"][0]["content"])
        return httpx2.Response(
            200,
            json={
                "id": "m",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-5",
                "content": [
                    {"type": "tool_use", "id": "t", "name": "record_conditions", "input": {"terms": next(answers)}}
                ],
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            },
        )

    monkeypatch.setitem(decomposition.CASE_SETS, "default", ASTHMA_AND_HF[:1])
    monkeypatch.setenv("PHENOFORGE_DATA_DIR", str(tmp_path))
    mock_claude(monkeypatch, handler)
    args = ["decompose-eval", "--decomposer", "claude", "--library", str(fixture_library), "--quiet", "--repeat", "3"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert len(calls) == 3, "each repeat asks the API again (no cached answer)"
    assert "3 runs (3 with at least one case scored)" in out and "95% CI [" in out
    assert "2 distinct term sets" in out
    spread = re.search(r"sd of the per-run means (\d\.\d+)", out)
    assert spread is not None and float(spread.group(1)) > 0


def test_assemble_refuses_a_circe_file_this_vocabulary_cannot_write_before_any_work(
    tmp_path: Path, fixture_library: Path, capsys
) -> None:
    """The embedded vocabulary's ids are not OMOP's: ATLAS would read other concepts, so --circe is refused."""
    out_circe = tmp_path / "set.json"
    code = main(
        [
            "assemble",
            DESCRIPTION,
            "--reviewer",
            "ann",
            "--yes",
            "--library",
            str(fixture_library),
            "--circe",
            str(out_circe),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "OMOP concept ids" in err and "--athena" in err
    assert not out_circe.exists() and audit.list_sessions() == []  # refused before a session was made


def test_assemble_writes_a_fhir_valueset_of_the_concept_set(tmp_path: Path, fixture_library: Path) -> None:
    from fhir.resources.R4B.valueset import ValueSet

    out_csv, out_fhir = tmp_path / "set.csv", tmp_path / "value_set.json"
    arguments = ["assemble", DESCRIPTION, "--reviewer", "ann", "--yes", "--library", str(fixture_library)]
    assert main([*arguments, "--csv", str(out_csv), "--fhir", str(out_fhir)]) == 0
    value_set = ValueSet.model_validate_json(out_fhir.read_text(encoding="utf-8"))
    codes = [row["code"] for row in csv.DictReader(out_csv.open()) if row["code"]]
    assert [concept.code for concept in value_set.compose.include[0].concept] == codes
