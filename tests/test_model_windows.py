"""The model window table (ctxguard/data/model_windows.toml, ``ctxguard.budget.MODEL_WINDOWS``): its
shape, how model ids resolve to it, the user's overrides, and that an installed package finds it."""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ctxguard
from ctxguard import budget
from ctxguard.budget import MODEL_WINDOWS, add_model_windows, load_model_windows, window_for
from tests.docblocks import block

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "ctxguard" / "data" / "model_windows.toml"
FIELDS = {"window", "counts", "provider", "source", "checked", "confidence", "retired", "note"}
PROVIDERS = {"openai", "anthropic", "gcp.gemini", "gcp.vertex_ai", "mistral_ai", "cohere", "aws.bedrock", "deepseek",
             "x_ai", "groq", "ollama", "perplexity", "together_ai", "fireworks_ai"}


def shipped() -> dict[str, dict]:
    return tomllib.loads(DATA.read_text(encoding="utf-8"))["models"]


# -- the data file -----------------------------------------------------------------------------

def test_every_entry_has_a_positive_window_a_provider_an_https_source_and_a_past_checked_date():
    today = datetime.date.today()
    entries = shipped()
    assert len(entries) > 90
    for model, entry in entries.items():
        assert set(entry) <= FIELDS and {"window", "counts", "provider", "source", "checked"} <= set(entry), model
        window = entry["window"]
        assert isinstance(window, int) and not isinstance(window, bool) and window > 0, model
        assert entry["counts"] in ("input", "input+output"), model
        assert entry["provider"] in PROVIDERS, model
        assert re.fullmatch(r"https://[^\s/]+\.[a-z]+/\S*", entry["source"]), model
        assert type(entry["checked"]) is datetime.date and entry["checked"] <= today, model
        assert entry.get("confidence", "unconfirmed") == "unconfirmed", model
        if "retired" in entry:
            assert type(entry["retired"]) is datetime.date and entry["retired"] <= today, model


def test_the_documented_entry_is_a_shipped_one():
    """docs/budget.md, "The window table": its example is an entry of the shipped file, field for field."""
    [(model, entry)] = tomllib.loads(block("docs/budget.md", "The window table", "toml").text)["models"].items()
    assert set(entry) <= FIELDS
    assert {k: v for k, v in shipped()[model].items() if k in entry} == entry


def test_ids_are_lowercase_unique_and_never_look_like_a_wrapper_the_resolution_removes():
    headers = re.findall(r'^\[models\."([^"]+)"\]$', DATA.read_text(encoding="utf-8"), re.MULTILINE)
    assert len(headers) == len(set(headers)) == len(shipped())
    for model in headers:
        assert model == model.strip().lower() and model, model
        assert not re.search(r"[/@:\s]", model), model  # prefixes, Vertex versions and Ollama tags are cut
        assert not budget._BEDROCK.match(model), model  # a Bedrock-looking key would be unwrapped away


def test_the_import_time_reading_is_the_full_parse():
    """MODEL_WINDOWS is read with one regex, not tomllib (import time): it must see every entry."""
    assert budget._shipped() == {model: entry["window"] for model, entry in shipped().items()}
    assert budget._shipped() == MODEL_WINDOWS


def test_the_models_the_issue_names_are_in_the_table():
    for model in ("gpt-5.5", "gpt-5.4", "gpt-5.2", "gpt-4.1", "o3", "o4-mini", "claude-opus-5-5",
                  "claude-sonnet-5-5", "claude-haiku-5-5", "claude-fable-5-2", "claude-opus-4-8", "claude-sonnet-4-6",
                  "gemini-3.1-pro-preview", "gemini-2.5-pro", "command-a", "nova-pro", "llama3-3-70b-instruct",
                  "deepseek-v4-flash", "grok-4.7",
                  "llama-3.3-70b-versatile", "llama3.2", "qwen2.5", "codestral", "magistral-medium"):
        assert model in MODEL_WINDOWS, model
    assert shipped()["claude-sonnet-4-5"]["retired"] == datetime.date(2026, 11, 30)


def test_the_models_current_on_2026_12_06_are_in_the_table():
    """Issue 39, item 5: the table lagged a release (gemini-3.7-flash and gemini-3.8-flash had no window)."""
    for model, window in (("gemini-3.8-flash", 1_048_576), ("gemini-3.7-flash", 1_048_576),
                          ("gemini-3.6-flash", 1_048_576), ("gemini-3.5-flash-lite", 1_048_576),
                          ("gemini-3.1-flash-lite", 1_048_576),
                          ("gpt-6-astra", 1_050_000), ("gpt-5.6", 1_050_000), ("gpt-5.6-luna", 1_050_000),
                          ("claude-mythos-5-1", 1_000_000), ("grok-4.5", 500_000), ("sonar-pro", 200_000),
                          ("openrouter/openai/gpt-5.6-terra:batch", 1_050_000), ("openai/gpt-oss-120b", 131_072),
                          ("accounts/fireworks/models/llama-v3p3-70b-instruct", 131_072), ("gpt-oss:20b", 131_072)):
        assert window_for(model) == window, model
    checked = {entry["checked"] for entry in shipped().values()}
    assert checked == {datetime.date(2026, 12, 1), datetime.date(2026, 12, 6)}


# -- resolution --------------------------------------------------------------------------------

@pytest.mark.parametrize(("model", "window"), [
    # dated snapshots, versions, -latest
    ("gpt-4o-2024-08-06", 128_000), ("gpt-4-0613", 8_192), ("claude-sonnet-4-5-20250929", 200_000),
    ("claude-opus-4-5-latest", 200_000), ("models/gemini-2.0-flash-001", 1_048_576),
    ("command-r-plus-08-2024", 128_000), ("command-a-reasoning-08-2025", 256_000), ("grok-4-0709", 256_000),
    ("mistral-medium-latest", 262_144), ("mistral-medium-2505", 131_072), ("codestral-2508", 256_000),
    # Bedrock model ids
    ("anthropic.claude-sonnet-4-5-20250929-v1:0", 200_000), ("meta.llama3-3-70b-instruct-v1:0", 128_000),
    ("amazon.nova-pro-v1:0", 300_000), ("mistral.mistral-large-2407-v1:0", 128_000),
    ("cohere.command-r-plus-v1:0", 128_000), ("anthropic.claude-opus-4-7", 1_000_000),
    ("anthropic.claude-haiku-4-5-20251001-v1:0:200k", 200_000),
    # cross-region inference profiles
    ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", 200_000), ("eu.anthropic.claude-opus-4-8-v1:0", 1_000_000),
    ("apac.amazon.nova-lite-v1:0", 300_000), ("global.anthropic.claude-opus-4-5-20251101-v1:0", 200_000),
    ("us-gov.anthropic.claude-sonnet-4-5-20250929-v1:0", 200_000),
    ("jp.anthropic.claude-haiku-4-5-20251001-v1:0", 200_000),
    ("au.anthropic.claude-sonnet-4-6", 1_000_000), ("ca.amazon.nova-micro-v1:0", 128_000),
    # ARNs
    ("arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0", 200_000),
    ("arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-haiku-4-5-20251001-v1:0", 200_000),
    ("arn:aws:bedrock:eu-west-1::foundation-model/meta.llama3-1-70b-instruct-v1:0", 128_000),
    # Vertex
    ("claude-sonnet-4-5@20250929", 200_000), ("claude-opus-4-8@default", 1_000_000),
    ("projects/p/locations/us-east5/publishers/anthropic/models/claude-haiku-4-5@20251001", 200_000),
    # provider prefixes
    ("codex-mini-latest", 200_000), ("openai/gpt-4o", 128_000), ("groq/llama-3.3-70b-versatile", 131_072),
    ("models/gemini-2.5-pro", 1_048_576),
    ("OpenAI/GPT-5.5", 1_050_000), ("anthropic/claude-opus-5-5", 1_000_000),
    # Ollama tags
    ("llama3.2:3b", 131_072), ("qwen2.5:7b-instruct", 32_768), ("llama3.2", 131_072), ("llama3.1:latest", 131_072),
    ("registry.ollama.ai/library/qwen2.5:14b", 32_768),
    # never guessed
    ("gpt-4o-mini-tts", None), ("gpt-4.5-turbo", None), ("gemini-3-ultra", None), ("claude-opus-4-9", None),
    ("my-finetune-v7", None), ("us.anthropic.claude-unknown-v1:0", None), ("arn:aws:bedrock:us-east-1:1:"
     "application-inference-profile/a1b2c3", None), ("llama3.2-vision:11b", None), ("qwen3:8b", None),
    ("", None), (None, None), (41, None), (b"gpt-4o", None),
])
def test_every_id_form_resolves_to_the_underlying_models_window(model, window):
    assert window_for(model) == window
    assert window_for(model) == window  # the remembered resolution answers the same


def test_a_resolution_is_remembered_and_made_again_when_the_table_changes():
    assert window_for("acme-support-ft:7b") is None
    assert budget._remembered("acme-support-ft:7b", len(MODEL_WINDOWS)) == ("", False)
    assert budget._remembered.cache_info().hits == 1  # remembered: resolved once
    MODEL_WINDOWS["acme-support-ft"] = 8_192  # a direct edit of the public dict is seen too
    assert window_for("acme-support-ft:7b") == 8_192
    MODEL_WINDOWS["acme-support-ft"] = 4_096  # a changed value is read through the remembered key
    assert window_for("acme-support-ft:7b") == 4_096


def test_the_remembered_resolutions_are_bounded():
    for i in range(budget._RESOLVED_MAX * 3):
        window_for(f"unknown-model-{i}")
        assert budget._remembered.cache_info().currsize <= budget._RESOLVED_MAX
    assert window_for("gpt-4o") == 128_000
    huge = "x" * 10_000
    before = budget._remembered.cache_info()
    assert window_for(huge) is None  # a long string is not kept
    assert budget._remembered.cache_info()[:2] == before[:2]
    assert window_for("openai/" + "a" * 300 + "/gpt-4o") == 128_000


# -- the family rule: a model the table does not have yet ------------------------------------------

@pytest.mark.parametrize(("model", "window", "inferred_from"), [
    # a new minor takes the window of the version it follows
    ("gemini-3.9-flash", 1_048_576, "gemini-3.8-flash"), ("claude-sonnet-5-1", 1_000_000, "claude-sonnet-5"),
    ("gpt-5.7", 1_050_000, "gpt-5.6"), ("gpt-5.7-pro", 1_050_000, "gpt-5.5-pro"),
    ("claude-opus-4-9", 1_000_000, "claude-opus-4-8"), ("grok-4.8", 500_000, "grok-4.7"),
    ("gemini-3.6-flash-lite", 1_048_576, "gemini-3.5-flash-lite"),
    # one between known versions takes the one below it, not the newest (Opus 4.5 had 200K, 4.6 1M)
    ("claude-opus-4-2", 200_000, "claude-opus-4-1"), ("gpt-5.3", 400_000, "gpt-5.2"),
    # after the id is unwrapped, as every id form is
    ("claude-sonnet-5-1-20261101", 1_000_000, "claude-sonnet-5"),
    ("us.anthropic.claude-opus-4-9-v1:0", 1_000_000, "claude-opus-4-8"),
    ("claude-haiku-5-7@20261201", 1_000_000, "claude-haiku-5-5"), ("OpenAI/GPT-5.7-Pro", 1_050_000, "gpt-5.5-pro"),
    ("models/gemini-3.9-flash-001", 1_048_576, "gemini-3.8-flash"), ("llama3.3:70b", 131_072, "llama3.2"),
    # never across families: another vendor, another major, another variant, below every known version
    ("acme-large-3.5", None, None), ("my-finetune-v7", None, None), ("gemini-4.0-flash", None, None),
    ("claude-sonnet-6", None, None), ("qwen3:8b", None, None), ("gpt-5.7-sol-fast", None, None),
    ("gemini-3.1-flash", None, None), ("gemini-3-flash", None, None), ("llama3.2-vision:11b", None, None),
    ("gpt-4o-mini-tts", None, None), ("gpt-4o-2", None, None), ("command-a-plus-05-2026", None, None),
    # a version written with the other separator is the table's entry, not inferred (OpenRouter's ids)
    ("anthropic/claude-opus-4.7", 1_000_000, None), ("anthropic/claude-sonnet-4.5", 200_000, None),
    ("anthropic/claude-haiku-4.5", 200_000, None),
    # the table's own entries are read, not inferred (gpt-5.6 is now in the table: the alias of gpt-5.6-sol)
    ("gpt-5.6", 1_050_000, None), ("gpt-5.6-2026-07-09", 1_050_000, None), ("gemini-3.8-flash", 1_048_576, None),
])
def test_a_model_missing_from_the_table_gets_the_window_of_the_version_it_follows(model, window, inferred_from):
    assert budget._window(model) == (window, inferred_from or "")
    assert window_for(model) == (window if inferred_from is None else None)  # window_for is the table's word
    if window is None:
        with pytest.raises(ValueError, match="unknown context window"):
            ctxguard.budget_for(model)
    else:
        breakdown = ctxguard.budget_for(model)
        assert (breakdown.window, breakdown.window_inferred) == (window, inferred_from)


def test_budget_for_says_when_the_window_is_inferred_and_a_given_window_is_never():
    inferred = ctxguard.budget_for("gpt-5.7", system=1000)
    assert inferred.window_inferred == "gpt-5.6"
    assert str(inferred).splitlines()[0] == "  window                 1,050,000  inferred from gpt-5.6"
    assert ctxguard.budget_for("gpt-5.6").window_inferred is None
    assert ctxguard.budget_for("gpt-5.7", window=8000).window_inferred is None
    assert "inferred" not in str(ctxguard.budget_for("gpt-5.6"))


def test_user_entries_win_over_the_inference_and_join_their_family():
    assert budget._window("gpt-5.7") == (1_050_000, "gpt-5.6")
    add_model_windows({"gpt-5.7": 2_000_000})  # read from the table now, however it was remembered
    assert budget._window("gpt-5.7") == (2_000_000, "") and window_for("gpt-5.7") == 2_000_000
    assert budget._window("gpt-5.8") == (2_000_000, "gpt-5.7")
    add_model_windows({"acme-large-3": 32_768})  # an app's own family is a family too
    assert budget._window("acme-large-3.5") == (32_768, "acme-large-3")


def test_the_version_before_was_the_right_window_for_all_but_these_in_the_tables_history():
    """What the rule would have said for each entry had the table lacked it, against what the entry says.
    Under the window is a false alarm near the edge; over it lets a request through that the provider
    refuses: one entry (Grok 4.5, after Grok 4.3's 1M). A new such case in an update is for the docs."""
    under, over = set(), set()
    for model, window in budget._shipped().items():
        found = budget._version(model)
        before = [m for minor, m in budget._families(len(MODEL_WINDOWS)).get(found[0], ()) if minor < found[1]] \
            if found else []
        if before and MODEL_WINDOWS[before[-1]] != window:
            (under if MODEL_WINDOWS[before[-1]] < window else over).add(model)
    assert over == {"grok-4.5"}
    assert under == {"gpt-4.1", "gpt-5.4", "claude-opus-4-6", "claude-sonnet-4-6", "grok-4.3"}


@pytest.mark.parametrize(("model", "window", "inferred_from"), [
    ("gemini-3.9-flash", 1_048_576, "gemini-3.8-flash"), ("claude-sonnet-5-1", 1_000_000, "claude-sonnet-5"),
    ("gpt-5.7", 1_050_000, "gpt-5.6"), ("gpt-5.6", 1_050_000, None),
])
def test_an_inferred_window_is_marked_on_the_span(harness, client, model, window, inferred_from):
    """Through the openai SDK to the loopback fake: the span says where the window came from."""
    harness.start(mode="observe")
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=100)
    a = harness.spans()[-1].attributes
    assert a["ctxguard.budget.window"] == window
    assert a.get("ctxguard.budget.window_inferred") == inferred_from
    assert not any(s.startswith("payload_under_budget") for s in a.get("ctxguard.checks.skipped", ()))


def test_an_unknown_vendors_model_still_skips_naming_the_setting_that_fixes_it(harness, client):
    harness.start(mode="observe")
    client.chat.completions.create(model="acme-large-3.5", messages=[{"role": "user", "content": "hello"}])
    a = harness.spans()[-1].attributes
    assert "ctxguard.budget.window" not in a and "ctxguard.budget.window_inferred" not in a
    assert ("payload_under_budget: unknown context window for model 'acme-large-3.5' (set Budget(window=...), or give "
            "'acme-large-3.5' a window: instrument(model_windows=) or the CTXGUARD_MODEL_WINDOWS file)"
            ) in a["ctxguard.checks.skipped"]


# -- overrides ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "text"), [
    ("windows.toml", '"gpt-4o" = 64000\n"Acme-FT" = 16384\n'),
    ("windows.toml", '[models."gpt-4o"]\nwindow = 64000\nprovider = "openai"\n\n[models.acme-ft]\nwindow = 16384\n'),
    ("windows.json", json.dumps({"gpt-4o": 64_000, "acme-ft": 16_384})),
    ("windows.json", json.dumps({"models": {"gpt-4o": {"window": 64_000}, "acme-ft": {"window": 16_384}}})),
])
def test_an_override_file_in_either_format_and_shape_wins_over_the_shipped_table(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert load_model_windows(path) == {"gpt-4o": 64_000, "acme-ft": 16_384}
    window_for("gpt-4o-2024-08-06")  # remembered before the override: the override still wins
    add_model_windows(load_model_windows(path))
    assert window_for("gpt-4o-2024-08-06") == 64_000 and window_for("openai/acme-ft") == 16_384
    assert window_for("gpt-4.1") == 1_047_576 and window_for("my-finetune-v7") is None


@pytest.mark.parametrize(("lang", "name"), [("toml", "windows.toml"), ("json", "windows.json")])
def test_the_documented_windows_files_load_every_entry(tmp_path, lang, name):
    """docs/budget.md, "Adding or overriding windows": its example files, read from the doc itself. A
    TOML file may mix ids at its top level with tables under ``models`` (before: only the tables were read,
    and the gateway's cap on gpt-4o silently ignored)."""
    path = tmp_path / name
    path.write_text(block("docs/budget.md", "Adding or overriding windows", lang).text, encoding="utf-8")
    expected = {"my-finetune-v7": 32_768, "gpt-4o": 64_000}
    if lang == "toml":
        expected["acme-support-ft"] = 16_384
    assert load_model_windows(path) == expected


def test_an_id_given_twice_in_one_file_is_refused(tmp_path):
    path = tmp_path / "windows.toml"
    path.write_text('"gpt-4o" = 64000\n\n[models."GPT-4o"]\nwindow = 32000\n', encoding="utf-8")
    with pytest.raises(ValueError, match="'gpt-4o' is given twice"):
        load_model_windows(path)


@pytest.mark.parametrize(("name", "text", "problem"), [
    ("w.toml", '"gpt-4o" = [', "not TOML"),
    ("w.json", "{not json", "not JSON"),
    ("w.toml", '"gpt-4o" = -5', "positive number of tokens"),
    ("w.toml", '"gpt-4o" = true', "positive number of tokens"),
    ("w.json", '["gpt-4o", 1]', "expected a mapping"),
    ("w.json", '{"gpt-4o": "128k"}', "positive number of tokens"),
    ("w.toml", '"" = 5', "non-empty string"),
])
def test_an_invalid_file_says_what_is_wrong(tmp_path, name, text, problem):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=problem):
        load_model_windows(path)


def test_the_env_file_is_read_at_instrument_and_wins_over_the_code_and_the_table(harness, client, tmp_path,
                                                                                   monkeypatch):
    path = tmp_path / "windows.toml"
    path.write_text('"gpt-4o" = 3000\n', encoding="utf-8")
    monkeypatch.setenv("CTXGUARD_MODEL_WINDOWS", str(path))
    harness.start(mode="observe", model_windows={"gpt-4o": 2000, "acme-ft": 4000})
    assert window_for("gpt-4o") == 3000 and window_for("acme-ft") == 4000
    client.chat.completions.create(model="gpt-4o-2024-08-06", messages=[{"role": "user", "content": "hello"}])
    assert harness.spans()[-1].attributes["ctxguard.budget.window"] == 3000


def test_an_unreadable_or_invalid_env_file_is_one_warning_and_instrument_returns_a_guard(harness, tmp_path,
                                                                                          monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="ctxguard")
    bad = tmp_path / "windows.json"
    bad.write_text('{"gpt-4o": 0}', encoding="utf-8")
    for path in (bad, tmp_path / "missing.toml"):
        caplog.clear()
        monkeypatch.setenv("CTXGUARD_MODEL_WINDOWS", str(path))
        assert harness.start(mode="enforce") is not None
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warned) == 1 and "CTXGUARD_MODEL_WINDOWS" in warned[0] and str(path) in warned[0], warned
    assert window_for("gpt-4o") == 128_000 and window_for("my-finetune-v7") is None


def test_an_invalid_model_windows_argument_is_the_codes_mistake(harness):
    with pytest.raises(ValueError, match="positive number of tokens"):
        harness.start(mode="observe", model_windows={"gpt-4o": "big"})
    assert ctxguard._instrument.active_guard() is None and window_for("gpt-4o") == 128_000


# -- the installed package ---------------------------------------------------------------------

def test_an_installed_package_finds_the_data_file(tmp_path):
    """What setuptools puts in the wheel (its build_py: packages and package-data from pyproject.toml),
    imported from there and not from the source tree, reads the table through importlib.resources. (The
    same selection goes into the sdist: both were checked by hand with pip wheel and build_sdist.)"""
    src, lib = tmp_path / "src", tmp_path / "lib"  # a fresh copy: no egg-info left by an earlier build
    shutil.copytree(ROOT / "ctxguard", src / "ctxguard", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    build = f"from setuptools import setup; setup(script_args=['-q', 'build_py', '--build-lib', {str(lib)!r}])"
    subprocess.run([sys.executable, "-c", build], cwd=src, check=True, capture_output=True)
    assert (tmp_path / "lib" / "ctxguard" / "data" / "model_windows.toml").is_file()
    code = ("import ctxguard.budget as b, importlib.resources as r; "
            "print(b.__file__); print(len(b.MODEL_WINDOWS)); print(b.window_for('claude-opus-5-5')); "
            "print(r.files('ctxguard').joinpath('data/model_windows.toml').is_file())")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "lib")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                         check=True).stdout.split()
    assert out[0].startswith(str(tmp_path / "lib")), out
    assert out[1:] == [str(len(MODEL_WINDOWS)), "1000000", "True"]
