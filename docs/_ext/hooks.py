"""MkDocs hooks: the guides link to files of the repository outside ``docs/``.

The guides are also read on GitHub, where ``../examples/quickstart.py`` is the right link
from ``docs/``. For the site, every such file that exists is copied in as a static file
(a Markdown file is published as a page) and the link is rewritten to it; a link to a
file that does not exist is left alone, so the strict build reports it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

_ROOT = Path(__file__).resolve().parents[2]
_OUTSIDE = re.compile(r"\]\(\.\./([^)#\s]+)")


def _outside_targets(docs_dir: Path) -> set[str]:
    found: set[str] = set()
    for page in docs_dir.glob("*.md"):
        for target in _OUTSIDE.findall(page.read_text(encoding="utf-8")):
            if (_ROOT / target).is_file():
                found.add(target)
    return found


def on_files(files: Files, config: Any) -> Files:
    """Add the repository files the guides link to."""
    for target in sorted(_outside_targets(Path(config["docs_dir"]))):
        files.append(File(target, str(_ROOT), config["site_dir"], config["use_directory_urls"]))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Point ``../path`` links at the copies added by :func:`on_files`."""

    def relink(match: re.Match[str]) -> str:
        target = match.group(1)
        return f"]({target}" if (_ROOT / target).is_file() else match.group(0)

    return _OUTSIDE.sub(relink, markdown)
