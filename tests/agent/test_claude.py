"""The Claude decomposer through the real SDK code path, against a mock HTTP transport."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import anthropic
import httpx2
import pytest

from phenoforge.agent import claude
from phenoforge.agent.claude import PROMPT_VERSION, TOOL_NAME, default_decomposer, resolve_api_key
from phenoforge.agent.errors import (
    ClaudeAuthError,
    ClaudeNetworkError,
    ClaudeOutputError,
    ClaudeOverloadedError,
    ClaudeRateLimitError,
    ClaudeTimeoutError,
    DecomposerError,
    MissingAPIKeyError,
)

KEY = "sk-ant-test-SECRET-0123456789abcdef"


def tool_reply(terms: object, tool_id: str = "toolu_01A") -> dict:
    return {
        "id": "msg_01XYZ",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5",
        "content": [{"type": "tool_use", "id": tool_id, "name": TOOL_NAME, "input": {"terms": terms}}],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 412, "output_tokens": 31},
    }


def text_reply(text: str) -> dict:
    return {
        "id": "msg_01TXT",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 412, "output_tokens": 12},
    }


def error_body(kind: str, message: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011"}


class Server:
    """Scripted replies; records every request body."""

    def __init__(self, replies: list[Callable[[httpx2.Request], httpx2.Response]]) -> None:
        self.replies = list(replies)
        self.requests: list[dict] = []
        self.headers: list[httpx2.Headers] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(json.loads(request.content))
        self.headers.append(request.headers)
        if not self.replies:
            raise AssertionError("unexpected extra request")
        return self.replies.pop(0)(request)


def ok(body: dict) -> Callable[[httpx2.Request], httpx2.Response]:
    return lambda request: httpx2.Response(200, json=body, headers={"request-id": "req_1"})


def status(code: int, kind: str, message: str) -> Callable[[httpx2.Request], httpx2.Response]:
    retry = "true" if code in (429, 529) or code >= 500 else "false"
    return lambda request: httpx2.Response(
        code, json=error_body(kind, message), headers={"retry-after-ms": "1", "x-should-retry": retry}
    )


def make(server: Server, tmp_path: Path, max_retries: int = 2, **kwargs):
    client = anthropic.Anthropic(
        api_key=KEY,
        http_client=httpx2.Client(transport=httpx2.MockTransport(server)),
        max_retries=max_retries,
        timeout=5.0,
    )
    return default_decomposer(client=client, cache_dir=tmp_path / "claude", **kwargs)


def test_good_tool_use_reply(tmp_path: Path) -> None:
    server = Server([ok(tool_reply(["type 2 diabetes mellitus", "heart failure"]))])
    decompose = make(server, tmp_path)
    assert decompose("adults with type 2 diabetes and heart failure") == ["type 2 diabetes mellitus", "heart failure"]
    sent = server.requests[0]
    assert sent["tool_choice"] == {"type": "tool", "name": TOOL_NAME}
    assert sent["tools"][0]["strict"] is True
    assert sent["tools"][0]["input_schema"]["additionalProperties"] is False
    assert sent["model"] == claude.DEFAULT_MODEL
    headers = server.headers[0]
    assert KEY in (headers.get("x-api-key", "") + headers.get("authorization", ""))


def test_duplicate_terms_are_removed(tmp_path: Path) -> None:
    server = Server([ok(tool_reply(["Asthma", "asthma ", "COPD"]))])
    assert make(server, tmp_path)("asthma or COPD") == ["Asthma", "COPD"]


def test_malformed_json_text_then_valid(tmp_path: Path) -> None:
    server = Server([ok(text_reply('{"terms": ["heart failure"')), ok(tool_reply(["heart failure"]))])
    assert make(server, tmp_path)("patients with heart failure") == ["heart failure"]
    retry = server.requests[1]["messages"]
    assert len(retry) == 3 and "invalid" in retry[2]["content"]


def test_malformed_json_body_then_valid(tmp_path: Path) -> None:
    truncated = b'{"id": "msg_01", "type": "message", "content": [{"type": "tool_use"'

    def broken(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=truncated, headers={"content-type": "application/json"})

    server = Server([broken, ok(tool_reply(["asthma"]))])
    assert make(server, tmp_path)("adults with asthma") == ["asthma"]
    server = Server([broken, broken, broken])
    with pytest.raises(ClaudeOutputError, match="not valid JSON"):
        make(server, tmp_path, output_retries=2)("children with asthma")


def test_schema_violation_is_fed_back_as_tool_error(tmp_path: Path) -> None:
    server = Server([ok(tool_reply("heart failure")), ok(tool_reply(["heart failure"], tool_id="toolu_02"))])
    assert make(server, tmp_path)("patients with heart failure") == ["heart failure"]
    feedback = server.requests[1]["messages"][2]["content"][0]
    assert feedback["type"] == "tool_result" and feedback["is_error"] is True
    assert feedback["tool_use_id"] == "toolu_01A"


def test_empty_terms_exhaust_bounded_retries(tmp_path: Path) -> None:
    server = Server([ok(tool_reply([])) for _ in range(3)])
    decompose = make(server, tmp_path, output_retries=2)
    with pytest.raises(ClaudeOutputError, match="after 3 attempts"):
        decompose("adults aged 40 to 75")
    assert len(server.requests) == 3
    assert not list((tmp_path / "claude").glob("*.json")), "errors must never be cached"


def test_rate_limit_then_success(tmp_path: Path) -> None:
    server = Server(
        [
            status(429, "rate_limit_error", "Number of requests has exceeded your rate limit"),
            ok(tool_reply(["atrial fibrillation"])),
        ]
    )
    assert make(server, tmp_path, max_retries=2)("adults diagnosed with atrial fibrillation") == ["atrial fibrillation"]
    assert len(server.requests) == 2


def test_rate_limit_exhausted(tmp_path: Path) -> None:
    server = Server([status(429, "rate_limit_error", "slow down") for _ in range(2)])
    with pytest.raises(ClaudeRateLimitError, match="429"):
        make(server, tmp_path, max_retries=1)("asthma")


def test_overloaded_529(tmp_path: Path) -> None:
    server = Server([status(529, "overloaded_error", "Overloaded") for _ in range(2)])
    with pytest.raises(ClaudeOverloadedError, match="529"):
        make(server, tmp_path, max_retries=1)("asthma")
    assert len(server.requests) == 2


def test_unauthorised_401_is_not_retried(tmp_path: Path) -> None:
    server = Server([status(401, "authentication_error", "invalid x-api-key")])
    with pytest.raises(ClaudeAuthError, match="401") as caught:
        make(server, tmp_path, max_retries=2)("asthma")
    assert len(server.requests) == 1
    assert KEY not in str(caught.value) and KEY not in repr(caught.value)
    assert caught.value.__cause__ is None


def test_timeout(tmp_path: Path) -> None:
    def hang(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ReadTimeout("timed out", request=request)

    server = Server([hang, hang])
    with pytest.raises(ClaudeTimeoutError, match="in time"):
        make(server, tmp_path, max_retries=1)("asthma")
    assert len(server.requests) == 2


def test_network_failure(tmp_path: Path) -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    with pytest.raises(ClaudeNetworkError, match="network"):
        make(Server([refuse]), tmp_path, max_retries=0)("asthma")


def test_cache_hit_skips_the_api_and_holds_no_key(tmp_path: Path) -> None:
    server = Server([ok(tool_reply(["hypertension"]))])
    decompose = make(server, tmp_path)
    assert decompose("adults with high blood pressure") == ["hypertension"]
    assert decompose("  Adults with HIGH blood pressure ") == ["hypertension"]
    assert len(server.requests) == 1
    files = list((tmp_path / "claude").glob("*.json"))
    assert len(files) == 1
    text = files[0].read_text()
    assert KEY not in text and PROMPT_VERSION in text
    assert KEY not in repr(decompose)


def test_model_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHENOFORGE_CLAUDE_MODEL", "claude-haiku-4-5")
    server = Server([ok(tool_reply(["asthma"]))])
    make(server, tmp_path)("asthma")
    assert server.requests[0]["model"] == "claude-haiku-4-5"
    server = Server([ok(tool_reply(["asthma"]))])
    make(server, tmp_path, model="claude-opus-5")("asthma in children")
    assert server.requests[0]["model"] == "claude-opus-5"


def test_missing_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="ANTHROPIC_API_KEY"):
        resolve_api_key(secrets_paths=[tmp_path / "none.toml"])
    monkeypatch.setattr(claude, "_secrets_paths", lambda: [tmp_path / "none.toml"])
    with pytest.raises(MissingAPIKeyError):
        default_decomposer()


def test_key_from_streamlit_secrets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    flat = tmp_path / "flat.toml"
    flat.write_text(f'ANTHROPIC_API_KEY = "{KEY}"\n')
    nested = tmp_path / "nested.toml"
    nested.write_text(f'[anthropic]\napi_key = "{KEY}-2"\n')
    broken = tmp_path / "broken.toml"
    broken.write_text("this is = = not toml")
    assert resolve_api_key(secrets_paths=[broken, flat]) == KEY
    assert resolve_api_key(secrets_paths=[nested]) == f"{KEY}-2"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
    assert resolve_api_key(secrets_paths=[flat]) == "from-env"


def test_empty_description_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(DecomposerError, match="empty"):
        make(Server([]), tmp_path)("   ")


def test_key_never_reaches_the_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    caplog.set_level(logging.DEBUG)
    server = Server([status(401, "authentication_error", "invalid x-api-key")])
    with pytest.raises(ClaudeAuthError):
        make(server, tmp_path, max_retries=0)("asthma")
    server = Server([ok(tool_reply(["asthma"]))])
    make(server, tmp_path)("adults with asthma")
    assert caplog.records, "the SDK logs at debug level; the check must see them"
    assert KEY not in caplog.text


def test_built_client_has_timeout_and_bounded_retries(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    decompose = default_decomposer(timeout=12.5, max_retries=1, cache_dir=tmp_path)
    assert decompose.client.timeout == 12.5
    assert decompose.client.max_retries == 1
    assert KEY not in repr(decompose)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_budget_is_one_deadline_for_every_call(tmp_path: Path) -> None:
    """Once the run's budget is spent, calls fail at once without touching the network."""
    clock = FakeClock()
    server = Server([ok(tool_reply(["asthma"]))])
    client = anthropic.Anthropic(
        api_key=KEY, http_client=httpx2.Client(transport=httpx2.MockTransport(server)), max_retries=2, timeout=30.0
    )
    decompose = claude.ClaudeDecomposer(client, "claude-sonnet-5", cache=None, budget=10.0, clock=clock)
    assert decompose("adults with asthma") == ["asthma"]
    clock.now += 11.0
    with pytest.raises(ClaudeTimeoutError, match="budget of 10 s .--budget. is spent"):
        decompose("adults with heart failure")
    assert len(server.requests) == 1
    with pytest.raises(ValueError):
        claude.ClaudeDecomposer(client, "m", cache=None, budget=0)


def test_request_timeout_is_cut_to_the_remaining_budget(tmp_path: Path) -> None:
    clock = FakeClock()
    client = anthropic.Anthropic(api_key=KEY, max_retries=2, timeout=30.0)
    decompose = claude.ClaudeDecomposer(client, "m", cache=None, budget=9.0, clock=clock)
    per_request, timeout = decompose._request_client()
    assert timeout == pytest.approx(3.0) and per_request.timeout == pytest.approx(3.0)  # 3 attempts share 9 s
    unbounded = claude.ClaudeDecomposer(client, "m", cache=None)
    assert unbounded._request_client() == (client, None)


def test_hung_server_is_bounded_by_the_budget(hung_server, tmp_path: Path) -> None:
    import time

    url, accepted = hung_server
    client = anthropic.Anthropic(api_key=KEY, base_url=url, timeout=30.0, max_retries=1)
    decompose = default_decomposer(client=client, cache_dir=tmp_path, budget=1.0)
    started = time.monotonic()
    for description in ("adults with asthma", "adults with heart failure", "adults with gout"):
        with pytest.raises(ClaudeTimeoutError):
            decompose(description)
    elapsed = time.monotonic() - started
    assert accepted, "the client did connect"
    assert elapsed < 5.0, f"three calls took {elapsed:.1f} s against a 1 s budget (a 30 s timeout each would be 180 s)"
