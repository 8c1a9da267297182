"""The package's modules import each other without a circle, and in layers: the models
and the engine both read the cache package (``models -> cache <- runner``); no model
imports the engine, and the cache imports neither.

Every import counts, the ones inside functions too (a lazy import that breaks a circle
at run time still ties two modules together): the graph is read from the sources with
`ast`, and a module may import its own package (``from . import x`` in a submodule) but
no module may reach itself through others.
"""
import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "python" / "metalrt"


def _modules() -> dict:
    """{dotted name: path} of every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("metalrt",) + path.relative_to(PACKAGE).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: pathlib.Path, modules: dict) -> set:
    """The package's modules that module `name` imports (a name imported from a module
    counts as that module unless it is a submodule)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            targets += [base] + [f"{base}.{alias.name}" for alias in node.names]
    found = set()
    for target in targets:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        # A submodule importing its own package (or the package's _metalrt) is no circle.
        if target and target != name and not name.startswith(target + "."):
            found.add(target)
    return found


def _circles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_import_circles():
    modules = _modules()
    assert "metalrt.ops" in modules and "metalrt.models" in modules   # the graph is real
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "metalrt.tensor" in graph["metalrt.ops._args"]
    assert _circles(graph) == []


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _importers(graph: dict, layer: str, of: str) -> list:
    """(module, import) pairs where a module of package ``layer`` imports one of ``of``."""
    return sorted((name, target) for name, targets in graph.items() if _inside(name, layer)
                  for target in targets if _inside(target, of))


def test_models_and_cache_do_not_import_the_runner():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "metalrt.cache" in graph["metalrt.models.attention"]   # the graph is real
    assert "metalrt.cache" in graph["metalrt.runner.engine"]
    assert _importers(graph, "metalrt.models", "metalrt.runner") == []
    assert _importers(graph, "metalrt.cache", "metalrt.runner") == []
    assert _importers(graph, "metalrt.cache", "metalrt.models") == []


def test_an_import_across_layers_is_found():
    graph = {"p.models.a": {"p.runner.b"}, "p.models": {"p.cache"}, "p.runner.b": {"p.models.a"}}
    assert _importers(graph, "p.models", "p.runner") == [("p.models.a", "p.runner.b")]


def test_a_circle_is_found():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
