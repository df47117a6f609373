"""MkDocs hook: pages of the site that live outside ``docs/`` in the repository.

``CONTRIBUTING.md`` (repository root) and ``bench/README.md`` (the benchmarks and
their recorded figures, with the plots under ``bench/results/``) are read where
they are and added to the site as ``contributing.md`` and ``bench/README.md``, so
each exists once and a page of the site can link to it. Links inside them that are
relative to the repository root (``bench/README.md`` from ``CONTRIBUTING.md``) then
resolve in the site too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

#: ``{path in the repository: path in the site}``.
PAGES = {
    "CONTRIBUTING.md": "contributing.md",
    "bench/README.md": "bench/README.md",
}
#: Folders whose images the pages above show, added at the same relative path.
IMAGE_DIRS = ("bench/results",)


def on_files(files: Files, config: Any) -> Files:
    """Add the repository's pages (and the images they show) to the site's files."""
    root = Path(config.config_file_path).parent
    for source, target in PAGES.items():
        path = root / source
        if not path.is_file():
            raise PluginError(f"{source}: not found (repo_files hook)")
        files.append(File.generated(config, target, abs_src_path=str(path)))
    for folder in IMAGE_DIRS:
        for image in sorted((root / folder).glob("*.png")):
            files.append(File.generated(config, f"{folder}/{image.name}", abs_src_path=str(image)))
    return files
