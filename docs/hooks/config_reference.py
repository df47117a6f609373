"""MkDocs hook: the configuration reference, generated from the pydantic models.

A page holds a marker per config file kind::

    <!-- floodgate:config pipeline.config:QueryGroupConfig FLOODGATE__ -->

and the hook replaces it, at build time, with one table per TOML section of the
model: every key with its type, default, allowed values and description. The
description is the attribute docstring under the field in the model's source (or a
``Field(description=...)``), so the page says what the code says and cannot drift.
Nested models become sections of their own (``[query_group]``), a ``dict`` of
models a named section (``[input_streams.<name>]``).

Stream settings (the fields of ``pipeline.config.StreamSettings``) resolve system
defaults -> ``[query_group]`` -> the stream's section; their default column shows the
system default from ``pipeline.config.SYSTEM_DEFAULTS``.

A marker that does not resolve fails the build: the hook raises.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import itertools
import os
import re
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from typing import Annotated, Any, Literal, Union

import annotated_types
from mkdocs.exceptions import PluginError
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

MARKER = re.compile(r"<!--\s*floodgate:config\s+(?P<target>[\w.]+:\w+)(?:\s+(?P<env>\S+))?\s*-->")

#: Validators (``AfterValidator`` functions) described in words.
VALIDATOR_WORDS = {
    "check_bind_host": "an IPv4 address or a host name (RFC 1123); empty is refused",
}
#: Patterns described in words.
PATTERN_WORDS = {
    r"^[A-Za-z_][A-Za-z0-9_]*$": "an identifier: a letter or `_`, then letters, digits, `_`",
    r"^[A-Za-z0-9._-]{1,249}$": "a Kafka topic name: 1-249 of letters, digits, `.`, `_`, `-`",
}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each config marker of a page with its generated tables."""

    def render(match: re.Match[str]) -> str:
        target = match.group("target")
        try:
            module_name, name = target.split(":")
            model = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise PluginError(f"{page.file.src_uri}: config marker {target!r}: {exc}") from exc
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise PluginError(f"{page.file.src_uri}: {target} is no pydantic model")
        return "\n\n".join(_sections(model, [], match.group("env") or ""))

    return MARKER.sub(render, markdown)


# -- walking the model ----------------------------------------------------------------


def _sections(model: type[BaseModel], path: list[str], env: str) -> Iterator[str]:
    """Markdown for ``model`` at ``path`` (its section's keys), then its nested sections."""
    scalars: list[tuple[str, FieldInfo, str]] = []
    nested: list[tuple[list[str], type[BaseModel]]] = []
    docs = _attribute_docs(model)
    for name, info in model.model_fields.items():
        key = info.alias or name
        inner = _unwrap_optional(info.annotation)
        if _is_model(inner):
            nested.append(([*path, key], inner))
        elif typing.get_origin(inner) is dict and _is_model(typing.get_args(inner)[1]):
            nested.append(([*path, key, "<name>"], typing.get_args(inner)[1]))
        else:
            scalars.append((key, info, docs.get(name, "")))
    if scalars:
        yield _table(model, path, scalars, env)
    for sub_path, sub_model in nested:
        yield from _sections(sub_model, sub_path, env)


def _table(
    model: type[BaseModel], path: list[str], fields: list[tuple[str, FieldInfo, str]], env: str
) -> str:
    title = f"`[{'.'.join(path)}]`" if path else "Top-level keys"
    lines = [f"### {title}", ""]
    summary = _first_paragraph(inspect.getdoc(model) or "")
    if summary:
        lines += [_markdown(summary), ""]
    if env:
        parts = [p.upper() for p in path]
        parts = [p if p != "<NAME>" else "<NAME>" for p in parts]
        lines += [
            f"Environment override: `{env}{'__'.join([*parts, '<KEY>'])}`" + "=value.",
            "",
        ]
    lines += ["| key | type | default | allowed | description |", "|---|---|---|---|---|"]
    for key, info, doc in fields:
        description = doc or (info.description or "")
        lines.append(
            "| "
            + " | ".join(
                [
                    f"`{key}`",
                    _cell(_type_name(info.annotation)),
                    _cell(_default(model, key, info)),
                    _cell(_allowed(info)),
                    _cell(_markdown(description)) if description else "",
                ]
            )
            + " |"
        )
    return "\n".join(lines)


# -- types, defaults, constraints ------------------------------------------------------


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _unwrap_optional(annotation: Any) -> Any:
    """``X`` of ``X | None``, without ``Annotated`` wrappers."""
    annotation = _strip_annotated(annotation)
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _strip_annotated(args[0])
    return annotation


def _strip_annotated(annotation: Any) -> Any:
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _type_name(annotation: Any) -> str:
    annotation = _strip_annotated(annotation)
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = typing.get_args(annotation)
        names = [_type_name(a) for a in args if a is not type(None)]
        text = " or ".join(names)
        return f"{text} (optional)" if type(None) in args else text
    if origin is Literal:
        return "string"
    if origin is list:
        return f"list of {_type_name(typing.get_args(annotation)[0])}"
    if origin is dict:
        return f"table of {_type_name(typing.get_args(annotation)[1])}"
    if annotation is SecretStr:
        return "secret string"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "string"
    return {str: "string", int: "integer", float: "float", bool: "boolean"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )


def _default(model: type[BaseModel], key: str, info: FieldInfo) -> str:
    stream_settings, system_defaults = _stream_levels()
    name = next(n for n, i in model.model_fields.items() if (i.alias or n) == key)
    if (
        stream_settings is not None
        and issubclass(model, stream_settings)
        and name in stream_settings.model_fields
    ):
        value = getattr(system_defaults, name)
        shown = "the broker's" if value is None else f"`{_toml(value)}`"
        return f"inherited; system default {shown}"
    if info.default_factory is not None:
        return _machine_free(f"`{_toml(info.default_factory())}`")  # type: ignore[call-arg]
    if info.default is PydanticUndefined:
        return "required"
    if info.default is None:
        return "unset"
    return _machine_free(f"`{_toml(info.default)}`")


def _machine_free(text: str) -> str:
    """A default computed from the building machine (``admission.job_path`` starts with
    the folder of the running Python) shown with that folder named, not its path."""
    folder = os.path.dirname(os.path.abspath(sys.executable))
    if folder in text:
        return text.replace(folder, "<the folder of the service's Python>")
    return text


def _stream_levels() -> tuple[type[BaseModel] | None, Any]:
    try:
        config = importlib.import_module("pipeline.config")
        return config.StreamSettings, config.SYSTEM_DEFAULTS
    except (ImportError, AttributeError):
        return None, None


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, int):
        return str(value)  # as TOML takes it
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, SecretStr):
        return "(secret)"
    return str(value)


def _allowed(info: FieldInfo) -> str:
    """Allowed values and bounds, from the annotation and every ``Annotated`` inside it."""
    words: list[str] = []
    annotation = _strip_annotated(info.annotation)
    literal = _find_literal(annotation)
    if literal:
        words.append(", ".join(f'`"{v}"`' for v in literal))
    if _unwrap_optional(annotation) is bool:
        words.append("`true`, `false`")
    text = _unwrap_optional(annotation) is str
    for item in [*info.metadata, *_inner_metadata(info.annotation)]:
        words.extend(_constraint_words(item, text=text))
    return "; ".join(dict.fromkeys(words))


def _find_literal(annotation: Any) -> tuple[Any, ...]:
    annotation = _unwrap_optional(annotation)
    if typing.get_origin(annotation) is Literal:
        return typing.get_args(annotation)
    return ()


def _inner_metadata(annotation: Any) -> Iterator[Any]:
    """Metadata of ``Annotated`` types nested in unions, lists and dict values."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        _base, *extra = typing.get_args(annotation)
        for item in extra:
            if isinstance(item, FieldInfo):
                yield from item.metadata
            else:
                yield item
        yield from _inner_metadata(_base)
    elif origin in (Union, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from _inner_metadata(arg)
    elif origin is list:
        for item in _inner_metadata(typing.get_args(annotation)[0]):
            yield ("each", item)


def _constraint_words(item: Any, *, text: bool = False) -> list[str]:
    """Words for one constraint; ``text``: the field is a string (a length is its
    characters, not entries)."""
    prefix = ""
    if isinstance(item, tuple) and item and item[0] == "each":
        prefix, item, text = "each: ", item[1], True
    words: list[str] = []
    bounds = {
        annotated_types.Ge: (">=", "ge"),
        annotated_types.Gt: (">", "gt"),
        annotated_types.Le: ("<=", "le"),
        annotated_types.Lt: ("<", "lt"),
    }
    for kind, (sign, attr) in bounds.items():
        if isinstance(item, kind):
            words.append(f"{prefix}{sign} {_number(getattr(item, attr))}")
    if isinstance(item, annotated_types.MinLen):
        if text and item.min_length == 1:
            words.append(f"{prefix}not empty")
        elif text:
            words.append(f"{prefix}at least {item.min_length} characters")
        else:
            plural = "entry" if item.min_length == 1 else "entries"
            words.append(f"{prefix}at least {item.min_length} {plural}")
    pattern = getattr(item, "pattern", None)
    if isinstance(pattern, str):
        words.append(prefix + PATTERN_WORDS.get(pattern, f"matches `{pattern}`"))
    func = getattr(item, "func", None)
    if callable(func):
        name = getattr(func, "__name__", "")
        words.append(prefix + VALIDATOR_WORDS.get(name, f"checked by `{func.__module__}.{name}`"))
    return words


def _number(value: Any) -> str:
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:_}".replace("_", " ")
    return str(value)


# -- descriptions ----------------------------------------------------------------------


def _attribute_docs(model: type[BaseModel]) -> dict[str, str]:
    """``{field: docstring}`` from the string literal under each annotated attribute of
    ``model`` and its bases (the nearest class wins)."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if cls in (BaseModel, object) or not issubclass(cls, BaseModel):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0]
        if not isinstance(body, ast.ClassDef):
            continue
        statements = body.body
        for current, following in itertools.pairwise(statements):
            if (
                isinstance(current, ast.AnnAssign)
                and isinstance(current.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[current.target.id] = inspect.cleandoc(following.value.value)
    return docs


def _first_paragraph(text: str) -> str:
    return text.strip().split("\n\n")[0]


_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc):`~?([^`]+)`")


def _markdown(text: str) -> str:
    """reStructuredText-ish docstring text as one line of Markdown."""
    text = _ROLE.sub(lambda m: f"`{m.group(1)}`", text)
    text = text.replace("``", "`")
    return " ".join(text.split())


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell: ``|`` and ``<...>`` escaped outside code spans."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside code spans (a pipe inside one is no separator)
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
    return "`".join(parts)
