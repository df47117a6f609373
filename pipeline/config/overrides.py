"""Environment overrides of a config file's keys, ``FLOODGATE__<SECTION>__<KEY>``
(:mod:`pipeline.config`): read as TOML values, a secret's taken as written."""

from __future__ import annotations

import tomllib
import typing
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import BaseModel, SecretStr

from pipeline.errors import ConfigError

#: Prefix of environment overrides of config keys.
OVERRIDE_ENV_PREFIX = "FLOODGATE__"


def secret_keys(model: Any) -> set[str]:
    """The keys of a pydantic model whose values are secrets (``SecretStr``, optional or
    not); none when ``model`` is no pydantic model."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return set()
    return {
        name
        for name, info in model.model_fields.items()
        if info.annotation is SecretStr or SecretStr in typing.get_args(info.annotation)
    }


def apply_env_overrides(
    raw: Mapping[str, Any], env: Mapping[str, str], *, verbatim: Collection[str] = ()
) -> dict[str, Any]:
    """Return a deep copy of ``raw`` with ``FLOODGATE__A__B=v`` overrides applied.

    A value is read as a TOML value (``250`` an int, ``true`` a bool, ``[1, 2]`` a
    list), or as text when it is none, except at the dotted keys of ``verbatim``
    (lower-case, ``admission.token``): those are taken as written, quotes and all --
    a secret such as a token is never parsed.
    """
    data = _deep_copy(raw)
    for name, text in sorted(env.items()):
        if not name.startswith(OVERRIDE_ENV_PREFIX):
            continue
        path = [part.lower() for part in name[len(OVERRIDE_ENV_PREFIX) :].split("__") if part]
        if not path:
            continue
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(
                    f"environment override {name}: {'.'.join(path)} crosses a scalar key",
                    key=".".join(path),
                    value=text,
                )
            node = child
        node[path[-1]] = text if ".".join(path) in verbatim else _parse_scalar(text)
    return data


def _parse_scalar(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value
