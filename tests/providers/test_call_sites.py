"""Every call site an installed SDK exposes that could reach a model is guarded, reached through
a guarded one, or listed in docs/supported.md as deliberately left out with the reason: a new
SDK release adding one (``client.beta.responses``, say) turns this red until it is decided."""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import inspect
import os
import pkgutil
import re
import warnings
from pathlib import Path

import pytest
import wrapt

SUPPORTED = Path(__file__).resolve().parents[2] / "docs" / "supported.md"
#: Stainless SDKs: public methods of these names on API resource classes.
STAINLESS_METHODS = ("create", "parse", "stream")
#: google-genai: public methods of its API modules whose names start so.
GOOGLE_PREFIXES = ("generate", "send_message", "create", "embed", "count", "compute", "edit", "upscale",
                   "recontext", "segment", "connect", "stream")
#: LiteLLM: module functions that send a model request.
LITELLM_FUNCTIONS = re.compile(r"a?(completion|text_completion|responses|anthropic_messages|chat)")
#: mistralai: public methods of its API classes (``BaseSDK`` subclasses) whose names start so.
MISTRAL_PREFIXES = ("complete", "stream", "parse", "start", "append", "restart", "run", "moderate", "classify",
                    "process", "create", "judge")


def _modules(package: str):
    root = importlib.import_module(package)
    yield root
    for info in pkgutil.walk_packages(root.__path__, package + ".", onerror=lambda name: None):
        if ".tests" in info.name or "._" in info.name.removeprefix(package):
            continue
        try:
            yield importlib.import_module(info.name)
        except BaseException:  # an optional dependency of that module is missing: not reachable
            continue


def _classes(package: str, is_resource):
    for module in _modules(package):
        for cls in vars(module).values():
            if inspect.isclass(cls) and cls.__module__ == module.__name__ and is_resource(cls):
                yield module, cls


def _stainless(sdk: str) -> list[str]:
    def is_resource(cls) -> bool:
        return any(base.__name__ in ("SyncAPIResource", "AsyncAPIResource") for base in cls.__mro__[1:])

    return [f"{module.__name__}.{cls.__name__}.{name}" for module, cls in _classes(f"{sdk}.resources", is_resource)
            for name in STAINLESS_METHODS if name in vars(cls)]


def _google() -> list[str]:
    from google.genai import _api_module

    def is_resource(cls) -> bool:
        return issubclass(cls, _api_module.BaseModule) or cls.__name__ in ("Chat", "AsyncChat")

    return [f"{module.__name__}.{cls.__name__}.{name}" for module, cls in _classes("google.genai", is_resource)
            for name, value in vars(cls).items()
            if not name.startswith("_") and callable(value) and name.startswith(GOOGLE_PREFIXES)]


def _mistral() -> list[str]:
    from mistralai.client.basesdk import BaseSDK

    def is_resource(cls) -> bool:
        return issubclass(cls, BaseSDK) and cls is not BaseSDK

    return [f"{module.__name__}.{cls.__name__}.{name}" for module, cls in _classes("mistralai.client", is_resource)
            for name, value in vars(cls).items()
            if not name.startswith("_") and callable(value) and name.startswith(MISTRAL_PREFIXES)]


def _ollama() -> list[str]:
    """Every public method of its two clients, and the module's functions bound to its default one."""
    import ollama

    # ``ollama._client`` is the default client; the module of that name holds the classes.
    methods = [f"ollama._client.{cls.__name__}.{name}" for cls in (ollama.Client, ollama.AsyncClient)
               for name, value in vars(cls).items() if not name.startswith("_") and callable(value)]
    return methods + [f"ollama.{name}" for name, value in vars(ollama).items()
                      if getattr(value, "__self__", None) is ollama._client]


def _cohere() -> list[str]:
    """Every public method of the cohere SDK's client classes (Fern's ``*Client``, ``*BaseCohere``)."""
    def is_resource(cls) -> bool:
        return cls.__name__.endswith(("Client", "BaseCohere"))

    return [f"{module.__name__}.{cls.__name__}.{name}" for module, cls in _classes("cohere", is_resource)
            for name, value in vars(cls).items() if not name.startswith("_") and callable(value)]


def _botocore() -> list[str]:
    """Every operation of a ``bedrock-runtime`` client (a class botocore generates), and the method
    they all go through."""
    import botocore
    import botocore.session

    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    return ["botocore.client.BaseClient._make_api_call"] + [
        f"botocore.client.BedrockRuntime.{botocore.xform_name(name)}" for name in model.operation_names]


def _bedrock_runtime_class() -> type:
    import botocore.session

    client = botocore.session.get_session().create_client(
        "bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return type(client)


def _litellm() -> list[str]:
    import litellm

    return [f"litellm.{name}" for name in dir(litellm)
            if LITELLM_FUNCTIONS.fullmatch(name) and callable(getattr(litellm, name))]


def _documented() -> list[tuple[str, str]]:
    """(pattern, status) of every row of the call-site tables in docs/supported.md."""
    rows = re.findall(r"^\| `([\w.*]+)` \| (guarded|through `[\w.]+`|left out: [^|]+?) \|$",
                      SUPPORTED.read_text(), re.MULTILINE)
    assert rows, "no call-site table in docs/supported.md"
    return rows


def _status(site: str, rows: list[tuple[str, str]]) -> str | None:
    return next((status for pattern, status in rows if fnmatch.fnmatchcase(site, pattern)), None)


def _resolve(site: str):
    module_name, class_name, method = site.rsplit(".", 2) if site.count(".") > 1 else (site, "", "")
    if site.startswith("litellm."):
        return importlib.import_module("litellm"), site.removeprefix("litellm.")
    if site.startswith("ollama.") and site.count(".") == 1:  # the default client's bound methods
        return importlib.import_module("ollama"), site.removeprefix("ollama.")
    if module_name == "botocore.client" and class_name == "BedrockRuntime":  # generated per client
        return _bedrock_runtime_class(), method
    return getattr(importlib.import_module(module_name), class_name), method


def _ours(value) -> bool:
    """Whether ctxguard's wrapper is anywhere in ``value``'s chain of wrappers."""
    for _ in range(32):
        if isinstance(value, wrapt.FunctionWrapper) and value._self_wrapper.__module__ == "ctxguard.intercept":
            return True
        if not hasattr(value, "__wrapped__"):
            return False
        value = value.__wrapped__
    return False


def _sdk_sites(sdk: str) -> list[str]:
    if sdk in ("openai", "anthropic"):
        pytest.importorskip(sdk)
        return _stainless(sdk)
    if sdk == "google-genai":
        pytest.importorskip("google.genai")
        return _google()
    if sdk == "mistralai":
        pytest.importorskip("mistralai.client")
        return _mistral()
    if sdk == "ollama":
        pytest.importorskip("ollama")
        return _ollama()
    if sdk == "cohere":
        pytest.importorskip("cohere.v2.client")
        return _cohere()
    if sdk == "botocore":
        pytest.importorskip("botocore")
        return _botocore()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    pytest.importorskip("litellm")
    return _litellm()


@pytest.mark.parametrize("sdk", [
    "openai", "anthropic", "google-genai", "litellm", "mistralai", "ollama", "cohere", "botocore"])
def test_every_call_site_is_guarded_or_left_out_with_a_reason(harness, sdk):
    sites = _sdk_sites(sdk)
    assert sites, f"no call sites found in {sdk}: the introspection is broken"
    harness.start(mode="observe")
    rows = _documented()
    undocumented = [site for site in sites if _status(site, rows) is None]
    assert undocumented == [], f"call sites of {sdk} neither guarded nor listed in docs/supported.md"
    for site in sites:
        status = _status(site, rows)
        owner, name = _resolve(site)
        value = vars(owner).get(name) if inspect.isclass(owner) else getattr(owner, name)
        if status == "guarded":
            assert _ours(value), f"{site} is documented as guarded but is not wrapped"
        elif status.startswith("through"):
            target = status.split("`")[1]
            assert _status(target, rows) == "guarded", f"{site} goes through {target}, which is not guarded"
        else:
            assert not _ours(value), f"{site} is wrapped but documented as {status!r}"


def test_a_call_site_ctxguard_wraps_is_documented_as_guarded(harness):
    from ctxguard import intercept
    from ctxguard.intercept.transports import TARGETS
    from ctxguard.providers import PROVIDERS
    from ctxguard.providers.base import SharedDispatch

    harness.start(mode="observe")
    rows = _documented()
    transports = {f"{module}.{attribute}" for p in PROVIDERS if isinstance(p.family, SharedDispatch)
                  for module, attribute, _ in p.family.transport}
    # The HTTP clients' hooks, where a request no call site guarded is observed from the wire.
    wire = set()
    for hooks in TARGETS.values():
        for module, method, _ in hooks:
            with contextlib.suppress(ImportError):
                owner_name, name = method.split(".")
                wire.add((getattr(importlib.import_module(module), owner_name), name))
    installation = intercept.active()
    assert installation is not None
    for site in installation.sites:
        owner, name = site.owner, site.name
        if owner is warnings or (owner, name) in wire:
            continue  # warnings.warn and the transport hooks are not call sites
        if inspect.isclass(owner) and f"{owner.__module__}.{owner.__qualname__}.{name}" in transports:
            continue  # nor an SDK's own transport (botocore's), where the body sent is read
        where = f"{owner.__module__}.{owner.__qualname__}" if inspect.isclass(owner) else owner.__name__
        site = f"{where}.{name}"
        assert _status(site, rows) == "guarded", site
