"""The provider registry: one declared record per supported SDK (``base.Provider``).

Patching (``ctxguard.intercept``), the metrics' ``provider`` label set, offline checking
and docs/supported.md all read ``PROVIDERS``. Adding a provider: write its module (an
adapter and its ``PROVIDER`` record) and add one line here. Provider modules translate
only: they import nothing of the guard, the call lifecycle or telemetry.

``text_scale(model)``: what a model's own tokenizer makes of text, asked of the provider modules
that know one, for every request whatever adapter read it (the measurer asks it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from . import anthropic
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

__all__ = ["BY_DISTRIBUTION", "BY_LABEL", "LABELS", "PROVIDERS", "TOKENIZERS", "Provider", "text_scale"]

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

#: The provider modules that know a model's own tokenizer: each gives the ratio of its models' token
#: counts to cl100k's (``RequestView.text_scale``), 1.0 for a model it does not know. A tokenizer is
#: the model's, not its API's: Claude's newer one reads a request to ``claude-sonnet-5`` on Anthropic's
#: API, Bedrock, Vertex, Anthropic's OpenAI SDK compatibility, OpenRouter (``anthropic/claude-sonnet-5``)
#: or any OpenAI-compatible gateway alike, so the measurer asks here for every request, not each
#: adapter on its own route (docs/budget.md, "Claude's tokenizers").
TOKENIZERS: tuple[Callable[[str | None], float], ...] = (anthropic.text_scale,)


@functools.lru_cache(maxsize=256)  # read on every call (``Measurer.measure``): once a model
def text_scale(model: str | None) -> float:
    """What ``model``'s own tokenizer makes of a text cl100k counts a token, as the provider module that
    knows the model says (``TOKENIZERS``); 1.0 where none does.

    >>> text_scale("claude-sonnet-5"), text_scale("anthropic/claude-opus-4.7"), text_scale("gpt-5")
    (1.3, 1.3, 1.0)
    """
    for scale in TOKENIZERS:
        found = scale(model)
        if found != 1.0:
            return found
    return 1.0
