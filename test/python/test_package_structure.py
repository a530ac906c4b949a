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
    # runtime imports cache; a function in cache importing runtime closes a cycle.
    assert "lazymlir.cache" in graph["lazymlir.runtime"]
    graph.setdefault("lazymlir.cache", set()).add("lazymlir.runtime")
    assert _cycle(graph) is not None


# The native modules: private to the package as a whole, imported from
# wherever they are used.
NATIVE = {"_device", "_native"}


def test_no_private_name_is_imported_from_another_folder():
    """Private names stay in their folder."""
    modules = _modules()
    bad = []
    for importer, imported, names, line in _imports(modules):
        folder = _package_of(importer, modules[importer])
        imported_folder = _package_of(imported, modules[imported])
        for n in names:
            if n.startswith("_") and n not in NATIVE and imported_folder != folder:
                bad.append(f"{importer}:{line} imports {imported}.{n}")
    assert not bad, bad
