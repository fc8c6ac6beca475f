"""Decomposition with Claude: a population description -> the clinical conditions it names.

One strict tool (``record_conditions``) is forced with ``tool_choice``, so the reply is a tool call
whose input matches a JSON schema; the input is validated again with Pydantic, and an invalid reply
is sent back as an error ``tool_result`` for at most ``output_retries`` corrective turns. HTTP-level
retries (429, 5xx, 529, connection errors) are the SDK's own, bounded by ``max_retries``. Every
failure surfaces as a :mod:`phenoforge.agent.errors` type whose message says what to do and never
contains the key.
"""

from __future__ import annotations

import json
import os
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import anthropic
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from phenoforge import config
from phenoforge.agent.cache import DecompositionCache
from phenoforge.agent.errors import (
    ClaudeAPIError,
    ClaudeAuthError,
    ClaudeNetworkError,
    ClaudeOutputError,
    ClaudeOverloadedError,
    ClaudeRateLimitError,
    ClaudeTimeoutError,
    DecomposerError,
    MissingAPIKeyError,
)

DEFAULT_MODEL = "claude-sonnet-5"
"""Sonnet: the speed/quality middle of the current line-up; override with PHENOFORGE_CLAUDE_MODEL."""
MODEL_ENV = "PHENOFORGE_CLAUDE_MODEL"
API_KEY_ENV = "ANTHROPIC_API_KEY"
PROMPT_VERSION = "decompose-v1"
TOOL_NAME = "record_conditions"
MAX_TERMS = 12

SYSTEM_PROMPT = """\
You turn a clinical study's population description into the clinical conditions a cohort \
definition must find as ICD-10-CM diagnoses.
Rules:
- Return one entry per distinct condition, as a short clinical term (e.g. "type 2 diabetes \
mellitus", "heart failure"). Split conjunctions and lists ("X and Y", "X or Y", "X, Y, or Z") \
into separate conditions.
- Drop demographic, setting and temporal qualifiers: age groups and sex ("adults", "women"), \
care settings ("hospitalized", "presenting to the emergency department"), timing ("history of", \
"newly diagnosed", "within 30 days"), and how the diagnosis was made ("confirmed by", \
"physician's diagnosis of").
- Translate lay wording into clinical terms ("high blood pressure" -> "hypertension", \
"heart attack" -> "myocardial infarction").
- Keep clinically meaningful specifiers that change the diagnosis (type 1 vs type 2, acute, \
chronic, stage).
- Do not invent conditions the description does not name.
Call the record_conditions tool exactly once."""

TOOL: dict[str, Any] = {
    "name": TOOL_NAME,
    "description": "Record the clinical conditions named by the population description.",
    "strict": True,
    "input_schema": {
        "type": "object",
        "properties": {
            "terms": {
                "type": "array",
                "items": {"type": "string"},
                "description": "One short clinical term per condition, most important first.",
            }
        },
        "required": ["terms"],
        "additionalProperties": False,
    },
}

Term = Annotated[str, StringConstraints(strip_whitespace=True, min_length=2, max_length=120)]


class DecompositionOutput(BaseModel):
    """What a valid tool input looks like; the strict schema is not trusted on its own."""

    model_config = ConfigDict(extra="forbid")
    terms: list[Term] = Field(min_length=1, max_length=MAX_TERMS)


def _secrets_paths() -> list[Path]:
    return [config.REPO_ROOT / ".streamlit" / "secrets.toml", Path.home() / ".streamlit" / "secrets.toml"]


def resolve_api_key(api_key: str | None = None, secrets_paths: list[Path] | None = None) -> str:
    """The key from the argument, ``ANTHROPIC_API_KEY``, or Streamlit ``secrets.toml``.

    The secrets file is read with tomllib (phenoforge never imports streamlit); both a top-level
    ``ANTHROPIC_API_KEY`` and ``[anthropic] api_key`` are accepted.
    """
    if api_key:
        return api_key
    from_env = os.environ.get(API_KEY_ENV, "").strip()
    if from_env:
        return from_env
    for path in secrets_paths if secrets_paths is not None else _secrets_paths():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            continue
        value = data.get(API_KEY_ENV)
        section = data.get("anthropic")
        if not value and isinstance(section, dict):
            value = section.get("api_key")
        if isinstance(value, str) and value.strip():
            return value.strip()
    raise MissingAPIKeyError(
        "no Anthropic API key: set ANTHROPIC_API_KEY or add ANTHROPIC_API_KEY to "
        ".streamlit/secrets.toml, or use the offline decomposer (--decomposer offline)"
    )


def resolve_model(model: str | None = None) -> str:
    return model or os.environ.get(MODEL_ENV, "").strip() or DEFAULT_MODEL


def _translate(error: anthropic.AnthropicError, model: str, timeout: float | None = None) -> DecomposerError:
    """SDK exception -> our typed error. Built from status codes only, so no body or header leaks."""
    if isinstance(error, anthropic.APITimeoutError):
        waited = f" within {timeout:g} s" if timeout else " in time"
        return ClaudeTimeoutError(f"the Anthropic API did not answer{waited}; try again, or raise --timeout")
    if isinstance(error, anthropic.APIConnectionError):
        return ClaudeNetworkError(
            "could not reach the Anthropic API (network error); check the connection or use the offline decomposer"
        )
    if isinstance(error, anthropic.APIStatusError):
        status = error.status_code
        if status in (401, 403):
            return ClaudeAuthError(f"the Anthropic API rejected the API key (HTTP {status}); check ANTHROPIC_API_KEY")
        if status == 429:
            return ClaudeRateLimitError("the Anthropic API rate limit was hit (HTTP 429); wait a minute and retry")
        if status == 529:
            return ClaudeOverloadedError("the Anthropic API is overloaded (HTTP 529); retry shortly")
        if status == 404:
            return ClaudeAPIError(f"model {model!r} was not found (HTTP 404); set {MODEL_ENV} to a current model id")
        if status >= 500:
            return ClaudeOverloadedError(f"the Anthropic API failed (HTTP {status}); retry shortly")
        return ClaudeAPIError(f"the Anthropic API refused the request (HTTP {status})")
    return ClaudeAPIError(f"unexpected reply from the Anthropic API ({type(error).__name__})")


def _extract(message: Any) -> tuple[str | None, Any]:
    """``(tool_use_id, raw input)`` from a reply; text replies are parsed as JSON as a fallback."""
    for block in message.content:
        if getattr(block, "type", None) == "tool_use" and block.name == TOOL_NAME:
            return block.id, block.input
    text = "".join(getattr(block, "text", "") for block in message.content if getattr(block, "type", "") == "text")
    if not text.strip():
        raise ValueError("the reply held neither a record_conditions call nor text")
    try:
        return None, json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"the reply was not valid JSON ({error.msg})") from None


def _clean(terms: list[str]) -> list[str]:
    """Order-preserving dedupe, case-insensitive."""
    seen: set[str] = set()
    out: list[str] = []
    for term in terms:
        key = " ".join(term.lower().split())
        if key not in seen:
            seen.add(key)
            out.append(" ".join(term.split()))
    return out


class ClaudeDecomposer:
    """Callable ``str -> list[str]`` backed by the Messages API, with an on-disk cache.

    ``budget`` (seconds, from the first call) bounds the whole run, not one request: each request's
    timeout is cut so that it and the SDK's retries fit in what is left, and once the budget is
    spent every further call fails at once with :class:`ClaudeTimeoutError` instead of waiting
    ``timeout`` again per case (a server that accepts connections and never answers).
    """

    def __init__(
        self,
        client: anthropic.Anthropic,
        model: str,
        cache: DecompositionCache | None,
        max_tokens: int = 512,
        output_retries: int = 2,
        budget: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if budget is not None and budget <= 0:
            raise ValueError("budget must be positive (seconds)")
        self.client = client
        self.model = model
        self.cache = cache
        self.max_tokens = max_tokens
        self.output_retries = output_retries
        self.last_from_cache = False
        self.budget = budget
        self._clock = clock
        self._deadline: float | None = None

    def _request_client(self) -> tuple[anthropic.Anthropic, float | None]:
        """The client for one request, its timeout cut to the run's remaining budget."""
        if self.budget is None:
            return self.client, None
        now = self._clock()
        if self._deadline is None:
            self._deadline = now + self.budget
        remaining = self._deadline - now
        if remaining <= 0:
            raise ClaudeTimeoutError(
                f"the run's time budget of {self.budget:g} s (--budget) is spent; no further request was sent. "
                "Raise --budget, or run fewer cases"
            )
        configured = self.client.timeout if isinstance(self.client.timeout, int | float) else None
        attempts = self.client.max_retries + 1
        per_attempt = remaining / attempts
        timeout = min(float(configured), per_attempt) if configured is not None else per_attempt
        return self.client.with_options(timeout=timeout), timeout

    def __repr__(self) -> str:  # never show the client (it holds the key)
        return f"ClaudeDecomposer(model={self.model!r}, prompt_version={PROMPT_VERSION!r})"

    def __call__(self, description: str) -> list[str]:
        description = description.strip()
        if not description:
            raise DecomposerError("the population description is empty")
        if self.cache is not None:
            cached = self.cache.get(self.model, PROMPT_VERSION, description)
            if cached is not None:
                self.last_from_cache = True
                return cached
        self.last_from_cache = False
        terms = self._ask(description)
        if self.cache is not None:
            self.cache.put(self.model, PROMPT_VERSION, description, terms)
        return terms

    def _ask(self, description: str) -> list[str]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"Population description:\n{description}"}]
        problem = ""
        for _attempt in range(self.output_retries + 1):
            client, timeout = self._request_client()
            try:
                message = client.messages.create(
                    model=self.model,
                    max_tokens=self.max_tokens,
                    system=SYSTEM_PROMPT,
                    tools=[TOOL],
                    tool_choice={"type": "tool", "name": TOOL_NAME},
                    messages=messages,
                )
            except anthropic.AnthropicError as error:
                raise _translate(error, self.model, timeout) from None
            except ValueError:  # a 200 whose body is not JSON (truncated by a proxy, say): ask again
                problem = "the API response body was not valid JSON"
                continue
            tool_id: str | None = None
            try:
                tool_id, raw = _extract(message)
                output = DecompositionOutput.model_validate(raw)
                return _clean(output.terms)
            except (ValueError, ValidationError) as error:
                problem = _describe(error)
            # corrective turn: hand the problem back and ask again
            assistant_content = [block.model_dump(exclude_none=True) for block in message.content]
            messages.append({"role": "assistant", "content": assistant_content or [{"type": "text", "text": "?"}]})
            feedback = (
                f"That reply was invalid: {problem}. Call {TOOL_NAME} again with a non-empty "
                f"'terms' list of at most {MAX_TERMS} short clinical terms."
            )
            if tool_id is not None:
                messages.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": tool_id, "is_error": True, "content": feedback}
                        ],
                    }
                )
            else:
                messages.append({"role": "user", "content": feedback})
        raise ClaudeOutputError(
            f"Claude's reply was still invalid after {self.output_retries + 1} attempts ({problem}); "
            "retry, or use the offline decomposer"
        )


def _describe(error: Exception) -> str:
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "input"
        return f"{where}: {first.get('msg', 'invalid')}"
    return str(error)


def default_decomposer(
    model: str | None = None,
    api_key: str | None = None,
    client: anthropic.Anthropic | None = None,
    cache_dir: Path | None = None,
    use_cache: bool = True,
    timeout: float = 30.0,
    max_retries: int = 2,
    output_retries: int = 2,
    budget: float | None = None,
) -> ClaudeDecomposer:
    """The real decomposer: a Claude call per (uncached) description.

    ``client`` lets tests pass ``anthropic.Anthropic(http_client=httpx2.Client(transport=...))``;
    without it a client is built from the resolved key, ``timeout`` (seconds per request) and
    ``max_retries``. ``budget`` (seconds) is one deadline for every call this decomposer makes.
    """
    resolved_model = resolve_model(model)
    if client is None:
        key = resolve_api_key(api_key)
        client = anthropic.Anthropic(api_key=key, timeout=timeout, max_retries=max_retries)
    cache = DecompositionCache(cache_dir) if use_cache else None
    return ClaudeDecomposer(client, resolved_model, cache, output_retries=output_retries, budget=budget)
