"""The documentation: the site builds without a warning, and every relative link of the Markdown files points to a
file (and a heading) that exists."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKDOWN = sorted([ROOT / "README.md", *(ROOT / "benchmarks").glob("*.md"), *(ROOT / "docs").rglob("*.md")])
FENCED = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _prose(path: Path) -> str:
    return FENCED.sub("", path.read_text(encoding="utf-8"))


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading (and the site's toc, configured with pymdownx's GitHub slugs)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors, seen = set(), {}
    for heading in HEADING.findall(_prose(path)):
        slug = _slug(heading)
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(_prose(path)) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_slug_matches_githubs_anchors():
    assert _slug("The wide term (`--wide`)") == "the-wide-term---wide"
    assert _slug("`speed_esm2.py`: training speed") == "speed_esm2py-training-speed"
    assert _slug("Budget allocation over parts (eqs. 11–20)") == "budget-allocation-over-parts-eqs-1120"


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files_and_headings(path):
    broken = []
    for target in _relative_links(path):
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


BENCHMARK_PAGE = re.compile(r"benchmarks/([\w-]+\.md)(?:#([\w-]+))?")


def test_mentions_of_benchmark_pages_point_to_pages_and_headings():
    """Where a guide, a docstring, a message, a test or a benchmark script names a benchmarks page
    (``benchmarks/training.md#refit-on-every-row``, as text or as a link), the page exists and so does the heading its
    anchor names: the figures moved between pages once, and a mention of the old place is easy to miss."""
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "src").rglob("*.py"),
             *(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]
    broken = []
    for path in files:
        for page, anchor in BENCHMARK_PAGE.findall(path.read_text(encoding="utf-8")):
            target = ROOT / "benchmarks" / page
            if not target.exists():
                broken.append(f"{path.relative_to(ROOT)}: no page benchmarks/{page}")
            elif anchor and anchor not in _anchors(target):
                broken.append(f"{path.relative_to(ROOT)}: no heading #{anchor} in benchmarks/{page}")
    assert not broken, "; ".join(broken)


def test_api_pages_document_every_export():
    """Each lazily exporting package's API page documents every public name (``::: promokit.<package>.<name>``;
    the top-level page may point to the page that does, as `pk.<name>`), and those of its subpackages, which have
    no page of their own (``promokit.experiments.conversion`` …)."""
    for page in (ROOT / "docs" / "api").glob("*.md"):
        package = "promokit" if page.stem == "index" else f"promokit.{page.stem}"
        module = importlib.import_module(package)
        if getattr(module, "_EXPORTS", None) is None:
            continue
        subpackages = () if package == "promokit" else getattr(module, "_SUBPACKAGES", ())
        names = [(package, name) for name in module._EXPORTS] + [
            (f"{package}.{sub}", name) for sub in subpackages
            for name in importlib.import_module(f"{package}.{sub}")._EXPORTS]
        text = page.read_text(encoding="utf-8") + "\n"
        missing = [f"{where}.{name}" for where, name in names
                   if f"::: {where}.{name}\n" not in text and f"`pk.{name}`" not in text]
        assert not missing, f"{page.relative_to(ROOT)} does not document {missing}"


def test_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install 'promokit[docs]'")
    pytest.importorskip("mkdocstrings_handlers.python",
                        reason="the docs extra is not installed: pip install 'promokit[docs]'")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "WARNING" not in output, output[-4000:]
    assert (tmp_path / "site" / "api" / "conversion" / "index.html").is_file()
