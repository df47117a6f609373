"""MkDocs hook: the command-line reference, generated from the Typer apps.

A page holds the marker::

    <!-- floodgate:cli floodgate -->

and the hook replaces it, at build time, with every command of the ``floodgate``
console script (the entry point in ``pyproject.toml``, ``pipeline.cli:app``) and of
the services it adds through the ``floodgate.commands`` entry point group
(``floodgate admission ...``, ``floodgate sweeper ...``): usage, help, and each
argument and option with its type, default and environment variable, as
``floodgate <command> --help`` prints them. Nothing is written by hand, so the page
cannot drift from the code.

A marker whose script cannot be loaded fails the build: the hook raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Any

from mkdocs.exceptions import PluginError

MARKER = re.compile(r"<!--\s*floodgate:cli\s+(?P<script>[\w-]+)\s*-->")
#: Options every Typer app has, not Floodgate's.
SKIPPED = {"install_completion", "show_completion"}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each CLI marker of a page with the generated command reference."""

    def render(match: re.Match[str]) -> str:
        script = match.group("script")
        return "\n\n".join(_commands(_load(script, page.file.src_uri), [script], None))

    return MARKER.sub(render, markdown)


def _load(script: str, where: str) -> Any:
    """The click command of a console script (a Typer app made a command)."""
    found = [e for e in entry_points(group="console_scripts") if e.name == script]
    if not found:
        raise PluginError(f"{where}: no console script {script!r} installed")
    app = found[0].load()
    try:
        import typer.main

        return typer.main.get_command(app)
    except Exception as exc:  # a plain click command is its own command
        if hasattr(app, "params"):
            return app
        raise PluginError(f"{where}: {script}: not a Typer app or command: {exc}") from exc


def _context(command: Any, name: str, parent: Any) -> Any:
    """A context for ``command`` (its own ``context_class``: click's, or the click that
    Typer vendors), without parsing any argument."""
    return command.context_class(command, info_name=name, parent=parent)


def _commands(command: Any, path: list[str], parent: Any) -> Iterator[str]:
    ctx = _context(command, path[-1], parent)
    level = min(len(path) + 1, 6)
    lines = [f"{'#' * level} `{' '.join(path)}`", ""]
    usage = " ".join(path + list(command.collect_usage_pieces(ctx)))
    lines += ["```text", f"Usage: {usage}", "```", ""]
    help_text = _help(command.help or "")
    if help_text:
        lines += [help_text, ""]
    rows = []
    for param in command.params:
        if param.name in SKIPPED or getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, text = record
        kind = "argument" if type(param).__name__.endswith("Argument") else "option"
        rows.append(f"| `{names}` | {kind} | {_cell(text)} |")
    if rows:
        lines += ["| argument or option | kind | meaning |", "|---|---|---|", *rows, ""]
    subcommands = getattr(command, "commands", None)
    if subcommands:
        lines += ["| command | what it does |", "|---|---|"]
        for name, sub in subcommands.items():
            if getattr(sub, "hidden", False):
                continue
            first = (sub.help or "").replace("``", "`").strip().split("\n\n")[0]
            lines.append(f"| `{' '.join([*path, name])}` | {_cell(first)} |")
        lines.append("")
    yield "\n".join(lines)
    for name, sub in (subcommands or {}).items():
        if not getattr(sub, "hidden", False):
            yield from _commands(sub, [*path, name], ctx)


def _help(text: str) -> str:
    """A command's help as Markdown paragraphs (reST literals made code spans, the
    characters Markdown would take for markup escaped outside code)."""
    text = text.replace("\b\n", "").replace("``", "`")
    paragraphs = [" ".join(p.split()) for p in text.strip().split("\n\n")]
    return "\n\n".join(_escape(p) for p in paragraphs if p)


def _escape(text: str, *, cell: bool = False) -> str:
    """``text`` with what Markdown would take for markup escaped outside code spans
    (and ``|`` too in a table ``cell``; a pipe inside a code span is no separator)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside code spans
        part = parts[i].replace("\\", "\\\\").replace("<", "&lt;").replace(">", "&gt;")
        for char in "*_[]" + ("|" if cell else ""):
            part = part.replace(char, "\\" + char)
        parts[i] = part
    return "`".join(parts)


def _cell(text: str) -> str:
    return _escape(" ".join(text.split()), cell=True)
