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


def _translate(error: anthropic.AnthropicError, model: str) -> DecomposerError:
    """SDK exception -> our typed error. Built from status codes only, so no body or header leaks."""
    if isinstance(error, anthropic.APITimeoutError):
        return ClaudeTimeoutError("the Anthropic API did not answer in time; try again, or raise --timeout")
    if isinstance(error, anthropic.APIConnectionError):
        return ClaudeNetworkError(
            "could not reach the Anthropic API (network error); check the connection or use the "
            "offline decomposer"
        )
    if isinstance(error, anthropic.APIStatusError):
        status = error.status_code
        if status in (401, 403):
            return ClaudeAuthError(
                f"the Anthropic API rejected the API key (HTTP {status}); check ANTHROPIC_API_KEY"
            )
        if status == 429:
            return ClaudeRateLimitError("the Anthropic API rate limit was hit (HTTP 429); wait a minute and retry")
        if status == 529:
            return ClaudeOverloadedError("the Anthropic API is overloaded (HTTP 529); retry shortly")
        if status == 404:
            return ClaudeAPIError(
                f"model {model!r} was not found (HTTP 404); set {MODEL_ENV} to a current model id"
            )
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
    """Callable ``str -> list[str]`` backed by the Messages API, with an on-disk cache."""

    def __init__(
        self,
        client: anthropic.Anthropic,
        model: str,
        cache: DecompositionCache | None,
        max_tokens: int = 512,
        output_retries: int = 2,
    ) -> None:
        self.client = client
        self.model = model
        self.cache = cache
        self.max_tokens = max_tokens
        self.output_retries = output_retries
        self.last_from_cache = False

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
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": f"Population description:\n{description}"}
        ]
        problem = ""
        for _attempt in range(self.output_retries + 1):
            try:
                message = self.client.messages.create(
                    model=self.model,
                    max_tokens=self.max_tokens,
                    system=SYSTEM_PROMPT,
                    tools=[TOOL],
                    tool_choice={"type": "tool", "name": TOOL_NAME},
                    messages=messages,
                )
            except anthropic.AnthropicError as error:
                raise _translate(error, self.model) from None
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
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": tool_id, "is_error": True, "content": feedback}
                ]})
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
) -> Callable[[str], list[str]]:
    """The real decomposer: a Claude call per (uncached) description.

    ``client`` lets tests pass ``anthropic.Anthropic(http_client=httpx2.Client(transport=...))``;
    without it a client is built from the resolved key, ``timeout`` (seconds) and ``max_retries``.
    """
    resolved_model = resolve_model(model)
    if client is None:
        key = resolve_api_key(api_key)
        client = anthropic.Anthropic(api_key=key, timeout=timeout, max_retries=max_retries)
    cache = DecompositionCache(cache_dir) if use_cache else None
    return ClaudeDecomposer(client, resolved_model, cache, output_retries=output_retries)
