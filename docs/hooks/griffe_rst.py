"""Griffe extension (loaded by mkdocstrings, ``extensions:`` in mkdocs.yml): the
reStructuredText of Floodgate's docstrings read as Markdown.

The docstrings are Google style with reST inline markup: ``:class:`~pipeline.x.Y```
roles and ``::`` before a literal block. Markdown has neither, so, as each object
is loaded:

* a role becomes a code span of its target (the last name with ``~``, as Sphinx
  shows it): ``:class:`~pipeline.errors.QueueFullError``` -> `QueueFullError`;
* a paragraph ending in ``::`` ends in ``:`` (the indented block after it is a
  code block in Markdown already).

The docstrings themselves are not changed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")
_LITERAL = re.compile(r"::[ \t]*$", re.MULTILINE)


def _role(match: re.Match[str]) -> str:
    target = match.group(2)
    if match.group(1):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def markdown(text: str) -> str:
    """Docstring text with reST roles and literal-block markers made Markdown."""
    return _LITERAL.sub(":", _ROLE.sub(_role, text))


class RstToMarkdown(griffe.Extension):
    """Rewrites each loaded object's docstring (see the module docstring)."""

    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
