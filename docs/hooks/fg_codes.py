"""MkDocs hook: the FG-* message codes of a page are exactly the code's.

Floodgate's stable log and error codes (``FG-QG-001``, ...) are string literals in
the log calls and error messages of ``pipeline/``, ``admission/``, ``sweeper/`` and
the JVM source (``jvm/src/main/java``);
there is no registry to generate a table from. A page that documents them holds the
marker ``<!-- floodgate:fg-codes -->`` and one table row per code
(``| `FG-QG-001` | ...``). At build time this hook collects every code the source
mentions and fails the build (an error in the log, which ``--strict`` turns into a
failure) when one is missing from the page or the page lists one the source no longer
has. The marker is replaced by a line saying how many codes were checked.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

MARKER = re.compile(r"<!--\s*floodgate:fg-codes\s*-->")
CODE = re.compile(r"\bFG-[A-Z]+-\d{3}\b")
ROW = re.compile(r"^\|\s*`(FG-[A-Z]+-\d{3})`", re.MULTILINE)
#: Where the codes live, relative to mkdocs.yml: folder and the files' pattern.
SOURCES = (
    ("pipeline", "*.py"),
    ("admission", "*.py"),
    ("sweeper", "*.py"),
    ("jvm/src/main/java", "*.java"),
)

log = logging.getLogger("mkdocs.hooks.fg_codes")


def source_codes(root: Path) -> dict[str, set[str]]:
    """``{code: {files that mention it}}`` over the Python and Java sources.

    ``FG-ADM-%s`` (a code built at run time from ``001``/``002``) is matched by the
    docstring that lists the codes, as every code is."""
    found: dict[str, set[str]] = {}
    for folder, pattern in SOURCES:
        for path in sorted((root / folder).rglob(pattern)):
            for code in CODE.findall(path.read_text(encoding="utf-8")):
                found.setdefault(code, set()).add(str(path.relative_to(root)))
    return found


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Check a page with the marker against the source, and fill the marker in."""
    if not MARKER.search(markdown):
        return markdown
    root = Path(config.config_file_path).parent
    in_source = source_codes(root)
    in_page = set(ROW.findall(markdown))
    missing = sorted(set(in_source) - in_page)
    stale = sorted(in_page - set(in_source))
    for code in missing:
        log.error(
            "%s: %s is in %s but has no row here",
            page.file.src_uri,
            code,
            ", ".join(sorted(in_source[code])),
        )
    for code in stale:
        log.error("%s: %s has a row here but no source file mentions it", page.file.src_uri, code)
    note = (
        f"*Checked when the site is built: these {len(in_page)} codes are exactly the ones "
        f"the source of `{'/`, `'.join(folder for folder, _ in SOURCES)}/` uses.*"
    )
    return MARKER.sub(note, markdown)
