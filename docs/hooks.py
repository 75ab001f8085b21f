"""MkDocs hooks (mkdocs.yml: ``hooks``) that let the repository's Markdown read the same on GitHub and in the site.

- README.md becomes the home page (``index.md``), benchmarks/README.md the page ``benchmarks/index.md`` and each other
  benchmarks/x.md the page ``benchmarks/x.md``;
- a relative link that leaves ``docs/`` is rewritten to the site page it means (README.md → index.md,
  benchmarks/README.md → benchmarks/index.md, docs/x.md → x.md); a link to any other file of the repository (a
  script, an example) has no page in the site and becomes its text and path;
- in the API pages, ``::: promokit.conversion.ConversionModel`` (the name users import) is resolved through the
  package's lazy exports (``_EXPORTS``) to the module that defines it, which mkdocstrings reads.
"""

from __future__ import annotations

import importlib
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
#: Repository files that are pages of the site, and the page each one is.
INCLUDED = {"README.md": "index.md", **{
    f"benchmarks/{page.name}": "benchmarks/index.md" if page.name == "README.md" else f"benchmarks/{page.name}"
    for page in sorted((ROOT / "benchmarks").glob("*.md"))}}
LINK = re.compile(r"(?<!!)\[([^\]\n]*)\]\(([^()\s]+)\)")
DIRECTIVE = re.compile(r"^::: (promokit(?:\.\w+)*)\.(\w+)$", re.M)


def on_files(files, config):
    for source, page in INCLUDED.items():
        files.append(File.generated(config, page, content=(ROOT / source).read_text(encoding="utf-8")))
    return files


def on_page_markdown(markdown, page, config, files):
    page_uri = page.file.src_uri
    source = next((src for src, uri in INCLUDED.items() if uri == page_uri), f"docs/{page_uri}")
    markdown = _rewrite_links(markdown, source, posixpath.dirname(page_uri))
    return DIRECTIVE.sub(_defining_module, markdown)


def _rewrite_links(markdown: str, source: str, page_dir: str) -> str:
    """Rewrite the links outside fenced code blocks (the even pieces between fences)."""
    pieces = re.split(r"(^(?:```|~~~).*?^(?:```|~~~)[^\n]*$)", markdown, flags=re.M | re.S)
    return "".join(piece if i % 2 else LINK.sub(lambda m: _link(m, source, page_dir), piece)
                   for i, piece in enumerate(pieces))


def _link(match: re.Match, source: str, page_dir: str) -> str:
    text, target = match.groups()
    if re.match(r"^[a-z][a-z0-9+.-]*:|^#", target):          # a URL, or an anchor on the same page
        return match.group(0)
    path, _, anchor = target.partition("#")
    repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
    if repo_path in INCLUDED:
        site_path = INCLUDED[repo_path]
    elif repo_path.startswith("docs/"):
        site_path = repo_path.removeprefix("docs/")
    else:
        return text if text.strip("`") == repo_path else f"{text} (`{repo_path}`)"
    relative = posixpath.relpath(site_path, page_dir or ".")
    return f"[{text}]({relative}{'#' + anchor if anchor else ''})"


def _defining_module(match: re.Match) -> str:
    package, name = match.groups()
    try:
        exports = getattr(importlib.import_module(package), "_EXPORTS", {})
    except ImportError:
        return match.group(0)
    return f"::: {exports[name]}.{name}" if name in exports else match.group(0)
