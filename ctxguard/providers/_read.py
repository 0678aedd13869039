"""Reading SDK arguments, shared by the provider modules: dicts, pydantic objects,
TypedDicts and the SDKs' "not given" sentinels all read the same way."""

from __future__ import annotations

import json
import marshal
import re
from collections.abc import Callable, Iterator, Mapping
from itertools import compress
from operator import itemgetter
from typing import Any

from ..cache import ENTRY_BYTES, TwoGenerationCache, str_bytes
from ..memo import Memo
from ..payload import REASONING_REFS, TOOL_RESULT, Item, RequestView

#: Type names of the SDKs' "not given" sentinels: Stainless's (openai, anthropic) and
#: Speakeasy's (mistralai's ``UNSET``); a field holding one is read as absent.
SENTINELS = frozenset({"NotGiven", "Omit", "Unset"})
ROLE_MAX = 32


#: The types most values read are: never an SDK's "not given" sentinel. ``__name__`` of a built-in
#: type builds a new string on every call; of a class (an SDK's sentinel), it is a look-up.
_PLAIN = frozenset({type(None), str, int, float, bool, list, dict, tuple})


class _MappingTypes(dict[type, bool]):
    """Whether each type is a Mapping, found at its first read: ``issubclass`` with an ABC is several
    times a dict look-up, and the SDKs' response and parameter types are few and fixed. A look-up
    here costs ~400 instructions, a ``functools.lru_cache`` hit ~860 (its key built, its call made):
    four a chat answer, 2,100 fewer a call (bench/instructions.py's guarded-own child at 20 messages,
    651,518 -> 649,411). Bounded: emptied when full."""

    def __missing__(self, cls: type) -> bool:
        if len(self) >= 1024:
            self.clear()
        found = self[cls] = issubclass(cls, Mapping)
        return found


_is_mapping = _MappingTypes()


def get(obj: Any, key: str) -> Any:
    cls: Any = type(obj)
    # A proxy's ``__class__`` is what it stands for: isinstance looks through it, issubclass does not.
    if cls is dict or _is_mapping[cls] or (obj.__class__ is not cls and isinstance(obj, Mapping)):
        value = obj.get(key)
    else:
        value = getattr(obj, key, None)
    kind = type(value)
    return None if kind not in _PLAIN and kind.__name__ in SENTINELS else value


def fields(obj: Any, *keys: str) -> list[Any]:
    """``get(obj, key)`` of each of ``keys``, whether ``obj`` is a mapping asked once: for an SDK's
    response, whose few objects answer several reads each (the OpenAI chat answer's eight reads of
    its result and usage: 9,200 instructions a call less, bench/instructions.py --own, 20 messages)."""
    cls: Any = type(obj)
    mapping = cls is dict or _is_mapping[cls] or (obj.__class__ is not cls and isinstance(obj, Mapping))
    values = []
    for key in keys:
        value = obj.get(key) if mapping else getattr(obj, key, None)
        kind = type(value)
        values.append(None if kind not in _PLAIN and kind.__name__ in SENTINELS else value)
    return values


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def role(value: Any, default: str) -> str:
    return value[:ROLE_MAX] if isinstance(value, str) and value else default


#: What may follow a model family's name in a model id: nothing, or a separator and anything
#: (``gpt-4o-2024-08-06``, ``o3-pro``, ``gpt-4o-mini@eu``), but not a dot or digit (``gpt-5.4`` is
#: not ``gpt-5``).
ANY_SUFFIX = re.compile(r"(?:[-@:_].*)?", re.DOTALL)


def family(model: object, table: Mapping[str, Any], suffix: re.Pattern[str] = ANY_SUFFIX) -> str | None:
    """The longest key of ``table`` that names ``model``'s family (a ``provider/`` prefix and case
    ignored), where what follows the key matches ``suffix``; None for a model not in the table.

    >>> family("openai/GPT-4o-mini-2024-07-18", {"gpt-4o": 1, "gpt-4o-mini": 2})
    'gpt-4o-mini'
    """
    if not isinstance(model, str):
        return None
    name = model.rsplit("/", 1)[-1].strip().lower()
    best: str | None = None
    for key in table:
        if name.startswith(key) and (best is None or len(key) > len(best)) and suffix.fullmatch(name, len(key)):
            best = key
    return best


_refs_of = itemgetter(2)


def last_query(items: list[Item]) -> int:
    """The index of the last user query of ``items``: a user message that is not tool results (0 if
    there is none). The answers before it are earlier turns; those after it, the agent loop it
    started, are the current one (Qwen3's template's ``last_query_index``, Anthropic's "current
    assistant turn")."""
    for i in range(len(items) - 1, -1, -1):
        role, _, refs, _, _ = items[i]
        if role == "user" and not any(ref.startswith(TOOL_RESULT) for ref in refs):
            return i
    return 0


def earlier_thinking_not_read(view: RequestView, messages: Any, first: int,
                              thinking: Callable[[Any], list[str]], before: int | None = None) -> None:
    """The thinking of the answers before the last user query, as not read (``RequestView.not_read``),
    for a model that leaves it out of its prompt: ``messages`` are the request's, read into the items
    from index ``first`` on, one each; ``thinking(message)`` gives the texts of its thinking parts,
    which the item's text joins to its others with a newline each (not read either). ``before``: the
    items up to which it is not read, if not the last user query (``len(view.items)``: none read)."""
    if not isinstance(messages, (list, tuple)):
        return
    last = last_query(view.items) if before is None else before
    # Only the items with refs can carry thinking: picked in C (``compress``), as this runs every call.
    for i in compress(range(first, last), map(_refs_of, view.items[first:last])):
        role, text, refs, _, _ = view.items[i]
        if role == "assistant" and not REASONING_REFS.isdisjoint(refs):
            texts = [part for part in thinking(messages[i - first]) if part]
            skipped = "\n".join(texts)
            if skipped:
                view.not_read[i] = skipped + "\n" if len(skipped) < len(text) else skipped


class Unread(Exception):
    """An argument left unread, so that the SDK gets it whole: a one-shot iterator (a generator,
    a ``map``) would be consumed by reading it, and the SDK would then send it empty."""


def unread_if_one_shot(value: Any, what: str) -> None:
    """Raise ``Unread`` if ``value`` is a one-shot iterator (its own ``__next__``)."""
    if hasattr(type(value), "__next__"):
        raise Unread(f"{what} is a one-shot iterator ({type(value).__name__}), left unread for the SDK")


def elements(value: Any, what: str) -> list[Any] | tuple[Any, ...]:
    """The elements of a list-valued argument (tool calls, summary parts), read without consuming
    it: a list or tuple as it is; nothing for None; ``Unread`` for a one-shot iterator."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return value
    unread_if_one_shot(value, what)
    return ()  # not a sequence the API takes: nothing to read


def text_of(value: Any) -> str:
    """A value a reader wants as text: a string as it is, a dict or list as canonical JSON
    (sorted keys, so two equal dicts give the same text whatever their key order, which a
    memo comparing by value relies on), anything else ``str()``-ed, except a one-shot
    iterator, which is left unread (``Unread``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        try:
            return canonical(value)
        except Exception:  # an element that will not serialise (a failing model_dump, a cycle)
            return str(value)
    unread_if_one_shot(value, "a value")
    return str(value)


class _Unkept(Exception):
    """A message the memo does not keep (see ``snapshot``)."""


def snapshot(value: Any, depth: int = 0) -> Any:
    """A deep copy of ``value`` if it is a tree of exactly ``dict`` (string keys), ``list``,
    ``str`` and ``None``; raises ``_Unkept`` otherwise. The memo keeps such copies of the
    messages it read and reuses the reading while the app's messages still equal them
    (``==``, in C). Numbers and booleans are not kept: ``1 == 1.0 == True``, yet they read
    as different text. Nor is anything else (a pydantic object, a tuple, a sentinel), whose
    equality says nothing about how it reads. Deeper than 16 levels is not kept either."""
    kind = type(value)
    if kind is str or value is None:
        return value
    if depth >= 16:
        raise _Unkept
    if kind is dict:
        copy = {}
        for key, inner in value.items():
            if type(key) is not str:
                raise _Unkept
            copy[key] = snapshot(inner, depth + 1)
        return copy
    if kind is list:
        return [snapshot(inner, depth + 1) for inner in value]
    raise _Unkept


def _kept_copy(message: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return snapshot(message)  # type: ignore[no-any-return]
    except _Unkept:
        return None


def structured_parts(content: Any, texts: list[str]) -> Iterator[Any]:
    """The parts of a message's ``content`` that are not plain text, in order; plain text
    (a string content, string parts, or anything else stringified) goes to ``texts``."""
    if content is None:
        return
    if isinstance(content, str):
        texts.append(content)
        return
    if not isinstance(content, (list, tuple)):
        unread_if_one_shot(content, "content")
        texts.append(text_of(content))
        return
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        else:
            yield part


def jsonable(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_unset=True)
    return str(obj)


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=jsonable, ensure_ascii=False)


def exact_key(value: Any) -> bytes | None:
    """A key that two values share only if they read the same: ``marshal``'s bytes of a tree of
    exactly the built-in types (dict, list, tuple, str, int, float, bool, None), which tell
    ``True`` from ``1`` from ``1.0`` and a list from a tuple, and which no code of the app's runs
    to make (a subclass, a pydantic object, anything else: None). Equal bytes load as one value,
    so they read the same; equal values in another key order differ, which only costs a miss.
    Version 2: the later ones mark objects by their reference counts and interning, which vary
    from call to call. A quarter of ``canonical``'s instructions."""
    try:
        return marshal.dumps(value, 2)
    except Exception:  # ValueError: unmarshallable, or nested too deep
        return None


Reader = Callable[[list[Any] | tuple[Any, ...]], list[str]]


def _rendering_bytes(key: tuple[Any, Any], value: str | tuple[str, ...]) -> int:
    inner = key[1]  # ``exact_key``'s bytes, canonical JSON or a pydantic class
    size = ENTRY_BYTES + (len(inner) if isinstance(inner, bytes) else str_bytes(inner) if isinstance(inner, str) else 0)
    return size + (str_bytes(value) if isinstance(value, str) else sum(map(str_bytes, value)))


#: Tools and response formats as a provider reads them (canonical JSON, OpenAI's rendering), by
#: ``(reader or kind, exact key or canonical JSON)``: apps send the same tools on every call, and
#: reading them costs a quarter of an agent's call. Keyed by the reader too: the same tools read as
#: OpenAI renders them and as canonical JSON differ. A memo of pure functions, so the process's,
#: not an installation's; bounded in entries and bytes (schemas can be large).
_RENDERINGS: TwoGenerationCache[tuple[Any, Any], Any] = TwoGenerationCache(1280, 4 * 1024 * 1024, _rendering_bytes)


def rendering(key: tuple[Any, Any], render: Callable[[], str]) -> str:
    """``render()``, kept by ``key`` (``(kind, the rendered value's exact key or canonical JSON)``)."""
    text: str | None = _RENDERINGS.get(key)
    if text is None:
        text = render()
        _RENDERINGS.put(key, text)
    return text


def tool_texts(tools: list[Any] | tuple[Any, ...], read: Reader) -> list[str]:
    """``read(tools)`` (which raises if they cannot be read), cached by ``read`` and ``exact_key``:
    a new list."""
    exact = exact_key(tools)
    if exact is None:
        return read(tools)
    key = (read, exact)
    cached: tuple[str, ...] | None = _RENDERINGS.get(key)
    if cached is None:
        cached = tuple(read(tools))
        _RENDERINGS.put(key, cached)
    return list(cached)


def _canonicals(tools: list[Any] | tuple[Any, ...]) -> list[str]:
    return [canonical(tool) for tool in tools]


def schemas(tools: Any, view: RequestView) -> None:
    """Tool schemas as canonical JSON (they count against the budget)."""
    if not isinstance(tools, (list, tuple)):
        return
    try:
        view.tools = tool_texts(tools, _canonicals)
    except Exception as exc:  # a tool schema that will not serialise is the app's business
        view.unreadable = f"tools could not be read ({type(exc).__name__})"


def _unchanged(seq: list[Any] | tuple[Any, ...], kept: list[dict[str, Any]]) -> int:
    """How many leading elements of ``seq`` still equal (by value) the copies kept of them."""
    n = len(seq) if len(seq) < len(kept) else len(kept)  # not min(): a builtin call costs 3x
    head = seq[:n] if type(seq) is list else list(seq[:n])
    if head == (kept if n == len(kept) else kept[:n]):  # one C loop of dict == (a tuple never equals a list)
        return n
    return next(i for i, (a, b) in enumerate(zip(head, kept, strict=False)) if a != b)


def _not_a_list(seq: Any, name: str) -> str:
    """Why ``seq`` is not read; never by iterating it (a generator is the app's own argument)."""
    try:
        unread_if_one_shot(seq, name)
    except Unread as why:
        return str(why)
    return f"{name} is not a list ({type(seq).__name__})"


def _resume(
    seq: Any, memo: Memo, model: str | None, view: RequestView
) -> tuple[int, list[dict[str, Any]], list[Item]]:
    """Where reading ``seq`` starts: after the leading messages the memo holds unchanged (their
    items already in ``view``), with the copies and items kept so far."""
    last = memo.read
    if last is None or last[2] != model:
        return 0, [], []
    start = _unchanged(seq, last[0])
    kept = last[1][:start]
    view.items.extend(kept)
    return start, last[0][:start], kept


def items(
    seq: Any,
    read: Callable[[Any, str | None], Item],
    view: RequestView,
    *,
    name: str,
    noun: str,
    plain_first: bool = False,
    memo: Memo | None = None,
    plain_cost: Callable[[str], int] | None = None,
) -> None:
    """Append every element of ``seq`` read as an Item; on any failure the view says why.

    ``plain_first``: the common ``{"role": ..., "content": "text"}`` message is read here, inline,
    without calling ``read`` (which gives the same Item for it; ``plain_cost(text)`` its cost, as
    ``read`` charges it: Mistral's all-caps surcharge): this loop runs once per message per call.
    ``memo``: the conversation's previous call (see ``ctxguard.memo``): its leading messages whose
    values are unchanged are not read again. Kept: plain messages, and messages of other shapes
    whose value is a tree of dicts, lists, strings and None (``snapshot``); the first message of
    any other kind ends what is kept. ``read(element, model)``: what an image costs depends on the
    model, so a memo read for another model is not reused.
    """
    if not isinstance(seq, (list, tuple)):
        view.unreadable = _not_a_list(seq, name)
        return
    model = view.model
    # ``copies``: of the leading kept messages, for the next call.
    start, copies, kept = _resume(seq, memo, model, view) if memo is not None and plain_first else (0, None, [])
    append = view.items.append
    for index in range(start, len(seq)):
        element = seq[index]
        if plain_first and type(element) is dict and len(element) == 2:
            r, content = element.get("role"), element.get("content")
            if type(r) is str and type(content) is str and 0 < len(r) <= ROLE_MAX:
                item: Item = (r, content, (), "message", 0 if plain_cost is None else plain_cost(content))
                append(item)
                if copies is not None:  # still in the leading run of kept messages: keep it
                    copies.append(element.copy())
                    kept.append(item)
                continue
        copy = _kept_copy(element) if copies is not None and type(element) is dict else None
        if copy is None and copies is not None and memo is not None:
            memo.read = (copies, kept, model)
            copies = None
        try:
            item = read(element, model)
        except Unread as why:
            view.items = []
            view.unreadable = f"{noun} {index}: {why}"
            return
        except Exception as exc:
            view.items = []
            view.unreadable = f"{noun} {index} could not be read ({type(exc).__name__})"
            return
        append(item)
        if copy is not None and copies is not None:  # still in the leading run: keep it
            copies.append(copy)
            kept.append(item)
    if copies is not None and memo is not None:
        memo.read = (copies, kept, model)


#: ``RequestView.settings`` names whose value is an int (the conventions' type), not a double.
_COUNTS = frozenset({"seed", "choice.count"})


def settings(source: Any, names: Mapping[str, str], view: RequestView) -> None:
    """Copy what ``source`` (the call's arguments, or a provider's config object within them) sets
    of ``names`` (the provider's parameter -> ``RequestView.settings`` name) into the view: numbers as
    numbers (a bool is not one), stop sequences as a tuple of str, anything else left out. A choice
    count of 1 is the default, so it is left out too (the conventions want it only when it is not)."""
    if source is None:
        return
    found = view.settings
    # Most calls set none of them: a dict (the call's keyword arguments) is asked only for those it has.
    keys = names.keys() & source.keys() if type(source) is dict else names
    for key in keys:
        name = names[key]
        value = get(source, key)
        if value is None or isinstance(value, bool):
            continue
        if name == "stop_sequences":
            stops = (value,) if isinstance(value, str) else value
            if isinstance(stops, (list, tuple)) and stops and all(isinstance(s, str) for s in stops):
                found[name] = tuple(stops)
        elif name in _COUNTS:
            if isinstance(value, int) and not (name == "choice.count" and value == 1):
                found[name] = value
        elif isinstance(value, (int, float)):
            found[name] = float(value)


def output_type(kind: Any) -> str | None:
    """``RequestView.settings["output.type"]`` of a requested response format's ``type``: structured
    output (a JSON schema, a JSON object) is ``json``, plain ``text`` is ``text``."""
    if kind in ("json_schema", "json_object", "json"):
        return "json"
    return "text" if kind == "text" else None


def tool_definitions(tools: Any) -> list[dict[str, Any]]:
    """A request's ``tools`` in the conventions' shape (``gen_ai.tool.definitions``, captured content
    only): a function tool as ``{"type": "function", "name", "description", "parameters"}`` whether
    the API nests it (Chat Completions' ``function``) or not (the Responses API's; Anthropic's, with
    ``input_schema``); another kind (a provider's built-in tool) as its type and name. A tool with no
    name (a built-in tool known by its type alone, a Python function the SDK converts) is left out:
    the conventions require one. ``description`` and ``parameters`` only where the request has them
    as a string and a JSON object."""
    if not isinstance(tools, (list, tuple)):
        return []
    found = []
    for tool in tools:
        function = get(tool, "function")
        spec = tool if function is None else function
        name = as_str(get(spec, "name"))
        if name is None:
            continue
        kind = as_str(get(tool, "type"))
        if kind not in (None, "function", "custom"):
            found.append({"type": kind, "name": name})
            continue
        definition: dict[str, Any] = {"type": "function", "name": name}
        description = as_str(get(spec, "description"))
        if description is not None:
            definition["description"] = description
        parameters = get(spec, "parameters")
        if parameters is None:
            parameters = get(spec, "input_schema")
        if isinstance(parameters, dict):
            definition["parameters"] = parameters
        found.append(definition)
    return found
