"""Typed, readable decomposer errors. Messages never contain the API key."""

from __future__ import annotations

from phenoforge.errors import PhenoforgeError


class DecomposerError(PhenoforgeError):
    """Decomposition failed; ``str(error)`` says what to do next."""


class MissingAPIKeyError(DecomposerError):
    """No Anthropic API key in the environment or in Streamlit secrets."""


class ClaudeAuthError(DecomposerError):
    """The API rejected the key (401) or its permissions (403)."""


class ClaudeRateLimitError(DecomposerError):
    """429 after the client's retries."""


class ClaudeOverloadedError(DecomposerError):
    """529 (or another 5xx) after the client's retries."""


class ClaudeAPIError(DecomposerError):
    """Any other API status error; carries the status code."""


class ClaudeNetworkError(DecomposerError):
    """The API could not be reached."""


class ClaudeTimeoutError(ClaudeNetworkError):
    """The request timed out."""


class ClaudeOutputError(DecomposerError):
    """Claude's reply did not validate after the bounded number of corrective retries."""


class DescriptionError(PhenoforgeError):
    """The population description is empty or too long to assemble from."""
