"""The Python package's layering (issue 33, DESIGN "Where things live"): its
modules import one another without a cycle, counting the imports made
inside functions (a cycle through those is still one: the stages cannot be
read, tested or moved apart), and no module imports another folder's
private names. Checked on the source with ``ast``, no import needed."""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "python" / "lazymlir"


def _modules():
    """Dotted name -> path of every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _package_of(name, path):
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imports(modules):
    """(importer, imported module, names, line) for every import of a package
    module by a package module, wherever it is in the source."""
    for name, path in modules.items():
        package = _package_of(name, path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        yield name, alias.name, [], node.lineno
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    if submodule in modules:  # from . import runtime
                        yield name, submodule, [], node.lineno
                    elif base in modules:
                        yield name, base, [alias.name], node.lineno


def _cycle(graph):
    """One import cycle (a list of modules, the first repeated last), or None."""
    state = {}  # module -> 1: on the path, 2: done
    path = []

    def visit(module):
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def _graph(modules):
    graph = {}
    for importer, imported, _, _ in _imports(modules):
        # A module's own package (__init__) runs before it: not an edge back.
        if importer != imported and not importer.startswith(imported + "."):
            graph.setdefault(importer, set()).add(imported)
    return graph


def test_the_package_has_no_import_cycle():
    cycle = _cycle(_graph(_modules()))
    assert cycle is None, " -> ".join(cycle)


def test_the_cycle_check_finds_a_cycle_through_a_function_level_import():
    """The check itself: a cycle closed by an import inside a function."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    modules = _modules()
    graph = _graph(modules)
    # run imports cache; a function in cache importing run closes a cycle.
    assert "lazymlir.execution.cache" in graph["lazymlir.execution.run"]
    graph.setdefault("lazymlir.execution.cache", set()).add("lazymlir.execution.run")
    assert _cycle(graph) is not None


# The native modules: private to the package as a whole, imported from
# wherever they are used.
NATIVE = {"_device", "_native"}


def _private(name):
    return name.startswith("_") and not name.startswith("__") and name not in NATIVE


def test_no_private_name_is_imported_from_another_folder():
    """Private names stay in their folder: neither imported by name nor
    reached as an attribute of a module imported from another folder."""
    modules = _modules()
    bad = []
    bound = {}  # importer -> {local name: module it binds}
    for importer, imported, names, line in _imports(modules):
        folder = _package_of(importer, modules[importer])
        imported_folder = _package_of(imported, modules[imported])
        for n in names:
            if _private(n) and imported_folder != folder:
                bad.append(f"{importer}:{line} imports {imported}.{n}")
        if not names and imported_folder != folder:
            bound.setdefault(importer, {})[imported.rpartition(".")[2]] = imported
    for importer, local in bound.items():
        for node in ast.walk(ast.parse(modules[importer].read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
                if node.value.id in local:
                    bad.append(f"{importer}:{node.lineno} uses {local[node.value.id]}.{node.attr}")
    assert not bad, bad


MODULE_LINES_MAX = 600


def test_every_module_is_at_most_600_lines():
    """A module a reader can hold in mind: split by what it does past this."""
    long = {
        name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MODULE_LINES_MAX
    }
    assert not long, long
