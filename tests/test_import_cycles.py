"""No module circles anywhere: the imports of every module under src/promokit, those inside functions and under
``if TYPE_CHECKING`` included, form no cycle (tests/test_architecture.py parses them; its own cycle test holds the
module-level imports, which Python runs on import)."""

from test_architecture import MODULES, find_cycle, imports


def test_imports_at_any_depth_form_no_cycle():
    graph = {name: sorted({target for target, _ in imports(name, path) if target in MODULES and target != name})
             for name, path in MODULES.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle (imports at any depth): " + " -> ".join(cycle)
