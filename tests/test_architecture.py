"""The layers of docs/architecture.md, checked on the source: every import of every module under src/promokit (at any
depth, inside functions too) is parsed with ``ast`` and held to the rules; module-level imports must not form a
cycle. Nothing is imported: the whole check parses about 200 files, in about a second."""

import ast
import functools
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src"
CORES = {"data", "nn", "training", "metrics", "lazy", "extras", "report", "console"}
DOMAINS = {"conversion", "voucher", "incentive", "value"}
EXECUTORS = {"scale"}
USE_CASES = {"allocation", "policy", "serve", "campaign"}
#: Synthetic worlds, benchmarks, demos, tuning studies and simulations against a world's truth, which may use every
#: layer but the CLI.
EXPERIMENTS = {"experiments", "datasets"}


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SOURCE / "promokit").rglob("*.py")):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = modules()


def imports(name: str, path: Path, module_level: bool = False) -> list[tuple[str, int]]:
    """(promokit module imported, line) for every import in the module; with ``module_level``, only those run when it
    is imported (not in a function, nor under ``if TYPE_CHECKING``). ``from package import name`` imports the
    submodule ``package.name`` when there is one, else the package."""
    return [(target, line) for target, line, top in _imports(name, path) if top or not module_level]


@functools.cache
def _imports(name: str, path: Path) -> tuple[tuple[str, int, bool], ...]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node, top: bool):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno, top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.append((child if child in MODULES else base, node.lineno, top))
        nested = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        type_only = isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in ast.iter_child_nodes(node):
            visit(child, top and not nested and not type_only)

    visit(ast.parse(path.read_text(encoding="utf-8")), True)
    return tuple((target, line, top) for target, line, top in found
                 if target == "promokit" or target.startswith("promokit."))


def layer(name: str) -> str:
    parts = name.split(".")
    if name == "promokit":
        return "root"
    if parts[1] == "cli":
        return "cli"  # the promokit command: promokit/cli/, its options and what its commands share
    for group, members in (("core", CORES), ("domain", DOMAINS), ("executor", EXECUTORS), ("use case", USE_CASES),
                           ("experiments", EXPERIMENTS)):
        if parts[1] in members:
            return group
    raise AssertionError(f"{name}: no layer holds promokit.{parts[1]}; add it to a layer here and in "
                         "docs/architecture.md")


#: What each layer may import (besides itself and the root package, whose ``__init__`` loads nothing).
ALLOWED = {
    "core": {"core"},
    "domain": {"core"},
    "executor": {"core"},
    "use case": {"core", "domain", "use case"},
    "experiments": {"core", "domain", "executor", "use case", "experiments"},
    "cli": {"core", "domain", "executor", "use case", "experiments", "cli"},
    "root": {"core"},
}


def where(name: str, line: int) -> str:
    path = name.replace(".", "/") + ("/__init__" if MODULES[name].name == "__init__.py" else "")
    return f"src/{path}.py:{line}"


def violations() -> list[str]:
    found = []
    for name, path in MODULES.items():
        here = layer(name)
        for target, line in imports(name, path):
            there = layer(target)
            if target == "promokit" or there == here and here != "domain":
                continue
            if here == "domain" and there == "domain":
                if target.split(".")[1] != name.split(".")[1]:
                    found.append(f"{where(name, line)}: {name} imports {target}: a domain never imports another "
                                 "domain")
                continue
            if there not in ALLOWED[here]:
                found.append(f"{where(name, line)}: {name} ({here}) imports {target} ({there})")
    return found


def test_every_module_has_a_layer():
    assert {layer(name) for name in MODULES} == {"root", "core", "domain", "executor", "use case", "experiments", "cli"}


def test_each_layer_imports_only_the_layers_below_it():
    found = violations()
    assert not found, "imports against the layers of docs/architecture.md:\n" + "\n".join(found)


def test_the_cli_is_one_package():
    """Every command lives in promokit/cli/ (a module per noun, the options in cli/options/): no domain, use case or
    other library package holds a ``cli.py``, an ``options.py`` or a ``cli`` package of its own."""
    found = [f"src/{path.relative_to(SOURCE)}" for path in sorted((SOURCE / "promokit").rglob("*.py"))
             if path.relative_to(SOURCE / "promokit").parts[0] != "cli"
             and (path.stem in ("cli", "options", "cli_support") or "cli" in path.relative_to(SOURCE).parts[:-1])]
    assert not found, "command-line modules outside promokit/cli/:\n" + "\n".join(found)
    assert (SOURCE / "promokit" / "cli" / "__init__.py").is_file()


def test_campaign_never_imports_the_service():
    """The decision service reads campaign directories: ``serve/`` imports ``campaign/``, never the other way."""
    found = [f"{where(name, line)}: {name} imports {target}"
             for name in MODULES if name.split(".")[1:2] == ["campaign"]
             for target, line in imports(name, MODULES[name]) if target.split(".")[1:2] == ["serve"]]
    assert not found, "campaign/ importing serve/:\n" + "\n".join(found)


def test_no_library_module_imports_the_cli():
    found = [f"{where(name, line)}: {name} imports {target}"
             for name in MODULES if layer(name) != "cli"
             for target, line in imports(name, MODULES[name]) if layer(target) == "cli"]
    assert not found, "library code importing the CLI:\n" + "\n".join(found)


def find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """The first cycle of ``graph`` (module → modules it imports) found depth first, closed on its first module."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = "open"
        stack.append(name)
        for target in graph[name]:
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[name] = "done"
        return None

    for name in graph:
        if name not in state and (cycle := visit(name)):
            return cycle
    return None


def test_module_level_imports_form_no_cycle():
    graph = {name: sorted({target for target, _ in imports(name, path, module_level=True) if target in MODULES})
             for name, path in MODULES.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle (module-level imports): " + " -> ".join(cycle)
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["b"]}) == ["b", "c", "b"]


@pytest.mark.parametrize("rule, package, source, expected", [
    ("a domain importing another", "incentive", "from promokit.value.contract import USER",
     "a domain never imports another"),
    ("a domain importing an executor", "incentive", "from promokit.scale.executor import make_executor", "(executor)"),
    ("a domain importing a use case", "incentive", "import promokit.allocation.budget", "(use case)"),
    ("a domain importing an experiment", "incentive", "from promokit.experiments.incentive.world import make_world",
     "(experiments)"),
    ("a use case importing an experiment", "campaign", "from promokit.experiments import allocation",
     "(experiments)"),
])
def test_the_rules_catch_what_they_forbid(rule, package, source, expected, tmp_path, monkeypatch):
    module = tmp_path / "promokit" / package / "bad.py"
    module.parent.mkdir(parents=True)
    module.write_text(f"def late():\n    {source}\n")
    monkeypatch.setitem(MODULES, f"promokit.{package}.bad", module)
    assert any(expected in line and f"src/promokit/{package}/bad.py:2:" in line for line in violations()), rule


def test_the_tests_mirror_the_packages():
    """``tests/`` has one folder per package of ``src/promokit`` (e.g. ``tests/serve/`` for ``promokit.serve``) and
    holds at its top only the checks of the project as a whole (layers, docs, guides, packaging, the top-level
    modules)."""
    tests = Path(__file__).resolve().parent
    packages = {path.parent.name for path in (SOURCE / "promokit").glob("*/__init__.py")}
    folders = {path.parent.name for path in tests.glob("*/test_*.py")}
    assert folders <= packages, f"test folders that are no package of src/promokit: {sorted(folders - packages)}"
    assert len(folders) >= 10
