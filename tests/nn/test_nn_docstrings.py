"""Every network of promokit (each ``torch.nn.Module`` subclass under src/promokit/nn and the domains' model modules)
and every model class the domains register documents itself as PyTorch Geometric's convolutions do: its paper (one
of the five, by its link or its text's file name) and equation, or the line saying it is a building block not from
the papers; an ``Args:`` section naming each constructor parameter; a ``Shapes:`` section with the input and output
shapes of ``forward``.

Only the core is imported (torch, PyG, LightGBM); a module whose import needs an optional extra that is not installed
is skipped and listed, and the check still needs at least 30 classes, so that skipped modules cannot make it pass
vacuously. A second check parses the sources (no import) so that a network defined outside these modules is noticed.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import logging
import re
from functools import cache
from pathlib import Path

import pytest
import torch

from promokit.extras import EXTRAS, MissingExtra

SOURCE = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SOURCE / "promokit"
DOMAINS = ("conversion", "voucher", "incentive", "value")
#: modules outside ``nn`` and ``<domain>/models`` that define a network
ALSO = ("promokit.voucher.pretrain",)
#: what names each paper in a docstring: its DOI, or the file name of its text where the text gives no link
PAPERS = {
    "ESM²": ("https://doi.org/10.1145/3397271.3401443", "esm2-post-click-decomposition.txt"),
    "GMCM": ("https://doi.org/10.1145/3397271.3401425", "gmcm-micro-behavior-graph-cvr.txt"),
    "DMBGN": ("dmbgn-voucher-redemption.txt",),
    "joint incentive": ("joint-incentive-hazard-allocation.txt",),
    "EOCA": ("eoca-expected-transaction-value.txt",),
}
NOT_FROM_PAPERS = "not from the papers"
FEWEST = 30


def _module_names() -> list[str]:
    def under(folder: Path) -> list[str]:
        return [".".join(path.relative_to(SOURCE).with_suffix("").parts).removesuffix(".__init__")
                for path in sorted(folder.glob("*.py"))]

    names = under(PACKAGE / "nn")
    for domain in DOMAINS:
        names += under(PACKAGE / domain / "models")
    return names + list(ALSO)


def _needs_missing_extra(error: ImportError) -> bool:
    if isinstance(error, MissingExtra):
        return True
    top = (getattr(error, "name", None) or "").split(".")[0]
    return any(top in modules for modules in EXTRAS.values())


@cache
def _imported() -> tuple[dict[str, object], dict[str, str]]:
    """(module name → module, skipped module name → why)."""
    modules, skipped = {}, {}
    for name in _module_names():
        try:
            modules[name] = importlib.import_module(name)
        except ImportError as error:
            if not _needs_missing_extra(error):
                raise
            skipped[name] = str(error)
    return modules, skipped


def _registered() -> set[type]:
    modules, _ = _imported()
    found = set()
    for domain in DOMAINS:
        package = modules.get(f"promokit.{domain}.models")
        for entry in getattr(package, "MODELS", {}).values():
            found.add(entry[0])
    return found


@cache
def _classes() -> dict[str, type]:
    """``module.Class`` → class, for every nn.Module subclass and registered model defined in the checked modules."""
    modules, _ = _imported()
    registered = _registered()
    found = {}
    for name, module in modules.items():
        for attribute, value in vars(module).items():
            if (inspect.isclass(value) and value.__module__ == name
                    and (issubclass(value, torch.nn.Module) or value in registered)):
                found[f"{name}.{attribute}"] = value
    return found


def _parameters(cls: type) -> list[inspect.Parameter]:
    """The constructor's parameters but self, ``*args`` and ``**kwargs``."""
    skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p for p in inspect.signature(cls.__init__).parameters.values()
            if p.name != "self" and p.kind not in skip]


def _doc(cls: type) -> str:
    """The class's own docstring (not one inherited), dedented."""
    return inspect.cleandoc(vars(cls).get("__doc__") or "")


def _section(doc: str, title: str) -> list[str] | None:
    """The lines of the Google-style section ``title:`` (indented under it), or None if there is none."""
    lines = doc.splitlines()
    if f"{title}:" not in lines:
        return None
    body = []
    for line in lines[lines.index(f"{title}:") + 1:]:
        if line.strip() and not line.startswith(" "):
            break
        body.append(line)
    return body


def _documented(doc: str) -> set[str]:
    """The names the ``Args:`` section documents (one entry per line at its first indentation)."""
    body = _section(doc, "Args") or []
    return {m.group(1) for line in body if (m := re.match(r"^    (\*{0,2}\w+)(?: \([^)]*\))?:", line))}


CLASSES = sorted(_classes())


def test_the_checked_modules_define_enough_classes():
    modules, skipped = _imported()
    assert len(CLASSES) >= FEWEST, (f"only {len(CLASSES)} classes found in {len(modules)} modules; skipped for a "
                                    f"missing extra: {skipped}")


@pytest.mark.parametrize("name", CLASSES)
def test_names_its_paper_or_says_it_is_not_from_them(name):
    doc = _doc(_classes()[name])
    markers = [marker for names in PAPERS.values() for marker in names]
    assert any(marker in doc for marker in markers) or NOT_FROM_PAPERS in doc, (
        f"{name}: the docstring names none of the papers ({', '.join(PAPERS)}: {markers}) and does not say "
        f"that it is {NOT_FROM_PAPERS!r}")


@pytest.mark.parametrize("name", CLASSES)
def test_args_names_every_constructor_parameter(name):
    cls = _classes()[name]
    doc, wanted = _doc(cls), [p.name for p in _parameters(cls)]
    if not wanted:
        return
    assert _section(doc, "Args") is not None, f"{name}: no 'Args:' section for {wanted}"
    missing = [p for p in wanted if p not in _documented(doc)]
    assert not missing, f"{name}: 'Args:' does not document {missing}"


@pytest.mark.parametrize("name", CLASSES)
def test_args_documents_no_parameter_the_constructor_lacks(name):
    cls = _classes()[name]
    signature = inspect.signature(cls.__init__).parameters.values()
    known = {p.name for p in signature} | {f"*{p.name}" for p in signature if p.kind is p.VAR_POSITIONAL} | {
        f"**{p.name}" for p in signature if p.kind is p.VAR_KEYWORD}
    stale = sorted(_documented(_doc(cls)) - known)
    assert not stale, f"{name}: 'Args:' documents {stale}, which the constructor does not take"


@pytest.mark.parametrize("name", CLASSES)
def test_shapes_gives_the_input_and_the_output(name):
    body = _section(_doc(_classes()[name]), "Shapes")
    assert body is not None, f"{name}: no 'Shapes:' section"
    text = "\n".join(body)
    assert "- **input:**" in text and "- **output:**" in text, (
        f"{name}: 'Shapes:' should list '- **input:** …' and '- **output:** …', got:\n{text}")


def test_no_network_is_defined_outside_the_checked_modules():
    """A class whose bases name ``Module`` (``nn.Module``, ``torch.nn.Module``) or one of the checked networks,
    found by parsing every source file, is one of the checked classes."""
    checked = {name.rpartition(".")[2] for name, cls in _classes().items() if issubclass(cls, torch.nn.Module)}
    _, skipped = _imported()
    outside = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(SOURCE).with_suffix("").parts).removesuffix(".__init__")
        if module in skipped:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [ast.unparse(base).rpartition(".")[2] for base in node.bases]
            if any(base == "Module" or base in checked for base in bases) and f"{module}.{node.name}" not in CLASSES:
                outside.append(f"{module}.{node.name}")
    assert not outside, f"networks outside the checked modules (add their module to ALSO): {outside}"


def test_the_sections_render_as_the_api_reference_parses_them():
    """mkdocstrings reads docstrings as Google style (mkdocs.yml): ``Args:`` must parse as parameters and
    ``Shapes:`` as a titled block (griffe's admonition), without a warning about either."""
    griffe = pytest.importorskip("griffe")
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger, handler = logging.getLogger("griffe"), Keep()
    logger.addHandler(handler)
    try:
        for name in CLASSES:
            cls = _classes()[name]
            records.clear()
            sections = griffe.Docstring(_doc(cls), parser="google").parse()
            kinds = {section.kind.value for section in sections}
            if _parameters(cls):
                assert "parameters" in kinds, f"{name}: 'Args:' does not parse as parameters"
            titles = [getattr(section, "title", None) for section in sections if section.kind.value == "admonition"]
            assert "Shapes" in titles, f"{name}: 'Shapes:' does not parse as a titled block ({kinds})"
            # without a parent object griffe cannot see the annotations: that warning says nothing about the text
            warnings = [m for m in records if "No type or annotation" not in m]
            assert not warnings, f"{name}: {warnings}"
    finally:
        logger.removeHandler(handler)
