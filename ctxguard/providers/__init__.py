"""The provider registry: one declared record per supported SDK (``base.Provider``).

Patching (``ctxguard.intercept``), the metrics' ``provider`` label set, offline checking
and docs/supported.md all read ``PROVIDERS``. Adding a provider: write its module (an
adapter and its ``PROVIDER`` record) and add one line here. Provider modules translate
only: they import nothing of the guard, the call lifecycle or telemetry.
"""

from __future__ import annotations

from .anthropic import PROVIDER as ANTHROPIC
from .base import Provider
from .bedrock import PROVIDER as BEDROCK
from .cohere import PROVIDER as COHERE
from .google_genai import PROVIDER as GOOGLE_GENAI
from .huggingface import PROVIDER as HUGGINGFACE
from .litellm import PROVIDER as LITELLM
from .mistral import PROVIDER as MISTRAL
from .ollama import PROVIDER as OLLAMA
from .openai import PROVIDER as OPENAI

__all__ = ["BY_DISTRIBUTION", "BY_LABEL", "LABELS", "PROVIDERS", "Provider"]

PROVIDERS: tuple[Provider, ...] = (
    OPENAI,
    ANTHROPIC,
    GOOGLE_GENAI,
    LITELLM,
    MISTRAL,
    OLLAMA,
    COHERE,
    BEDROCK,
    HUGGINGFACE,
)

BY_DISTRIBUTION: dict[str, Provider] = {p.distribution: p for p in PROVIDERS}
#: Captured bodies are judged offline by the provider their label names.
BY_LABEL: dict[str, Provider] = {p.label: p for p in PROVIDERS}
#: Every ``provider`` label a call may carry: a fixed, bounded set (metric series exist for each).
LABELS: tuple[str, ...] = tuple(dict.fromkeys(label for p in PROVIDERS for label in p.labels))
