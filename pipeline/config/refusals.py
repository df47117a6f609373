"""A config file pydantic refused, as the :class:`~pipeline.errors.ConfigError` an
operator reads: the dotted key, the value (never a secret) and what is allowed."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Union

from pydantic import BaseModel, ValidationError

from pipeline.config.query_group import QueryGroupConfig
from pipeline.errors import ConfigError
from pipeline.redaction import is_secret


def config_error(
    exc: ValidationError,
    source: str,
    *,
    model: type[BaseModel] | None = None,
    what: str = "query group file",
) -> ConfigError:
    """A :class:`ConfigError` from pydantic's ``exc`` that names, for the first refused
    key, the dotted key, the value (never a secret) and what is allowed; every refused
    key is listed in the message.

    Args:
        exc: the validation error.
        source: how to name the file.
        model: the config model validated (for the keys allowed where an unknown one
            was found); default :class:`QueryGroupConfig`.
        what: what the file is, for the message.
    """
    model = model or QueryGroupConfig
    lines = []
    first: dict[str, Any] | None = None
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        key = ".".join(loc) or "<file>"
        if error["type"] == "extra_forbidden":
            allowed = ", ".join(_allowed_keys(model, loc[:-1]))
            text = f"unknown key {key!r}; allowed here: {allowed}"
            value, allowed_text = _shown(key, error.get("input")), allowed
        elif error["type"] == "missing":
            text = f"missing key {key!r}"
            value, allowed_text = None, "a value is required"
        else:
            value = _shown(key, error.get("input"))
            allowed_text = error["msg"].removeprefix("Value error, ")
            if value is _HIDDEN:
                text = f"key {key!r} is refused: {allowed_text}"
            else:
                text = f"key {key!r} = {value!r} is refused: {allowed_text}"
        lines.append(text)
        if first is None:
            first = {"key": key, "value": value, "allowed": allowed_text}
    message = f"{source}: invalid {what}:\n  " + "\n  ".join(lines)
    return ConfigError(message, **(first or {}))


#: Stands for a value that an error must not echo (a section, or a secret).
_HIDDEN = "<not shown>"


def _shown(key: str, value: Any) -> Any:
    """The value as an error may show it: scalars only, never a secret (a key
    :func:`pipeline.redaction.is_secret` tells)."""
    if isinstance(value, Mapping | list) or is_secret(key):
        return _HIDDEN
    return value


def _allowed_keys(model: type[BaseModel], loc: list[str]) -> list[str]:
    """Keys allowed at ``loc`` inside ``model`` (walking dict values and optionals)."""
    annotation: Any = model
    for part in loc:
        annotation = _unwrap(annotation)
        origin = typing.get_origin(annotation)
        if origin is dict:
            annotation = typing.get_args(annotation)[1]
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = _field_by_key(annotation, part)
            if field is None:
                return []
            annotation = field
        else:
            return []
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return sorted(info.alias or name for name, info in annotation.model_fields.items())
    return []


def _field_by_key(model: type[BaseModel], key: str) -> Any:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info.annotation
    return None


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = args[0] if len(args) == 1 else annotation
            if len(args) != 1:
                return annotation
        else:
            return annotation
