"""tfsent's structure: no import circles, library modules never import a command-line
module, and each of the seven stages has the home docs/architecture.md gives it."""

import ast
import os
import re

from conftest import REPO

# The command-line modules (`python -m tfsent.NAME`): they import the library, never the
# other way round.
CLI_MODULES = {"tfsent.train", "tfsent.evaluate", "tfsent.export", "tfsent.mine",
               "tfsent.index"}


def _modules():
    """{module name: path} of every module in the package."""
    found = {}
    root = os.path.join(REPO, "tfsent")
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                module = os.path.relpath(path[:-3], REPO).replace(os.sep, ".")
                found[module[:-len(".__init__")] if module.endswith(".__init__") else module] = path
    return found


def _reexports(modules, package):
    """{name: defining module} of what a package's __init__ imports from its submodules."""
    names = {}
    tree = ast.parse(open(modules[package], encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package):
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                names[alias.asname or alias.name] = target if target in modules else node.module
    return names


def import_graph():
    """{module: {imported tfsent module}}, every import (top level or inside functions).
    `from package import name` counts as an import of the submodule that defines `name`
    when the package's __init__ only re-exports it (the facade is not a dependency)."""
    modules = _modules()
    packages = {m for m, p in modules.items() if p.endswith("__init__.py")}
    graph = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    if sub in modules:
                        targets.append(sub)
                    elif node.module in packages and node.module != module:
                        targets.append(_reexports(modules, node.module).get(alias.name,
                                                                            node.module))
                    else:
                        targets.append(node.module)
            for target in targets:
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in modules and target != module and target.startswith("tfsent"):
                    graph[module].add(target)
    return graph


def find_cycles(graph):
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_find_cycles_on_a_hand_made_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert find_cycles(graph) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    cycles = find_cycles(import_graph())
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_library_modules_never_import_a_command_line_module():
    bad = [f"{module} imports {target}" for module, targets in import_graph().items()
           for target in targets if target in CLI_MODULES and module not in CLI_MODULES]
    assert not bad, "\n".join(bad)


def test_every_stage_path_in_the_architecture_doc_exists():
    text = open(os.path.join(REPO, "docs", "architecture.md"), encoding="utf-8").read()
    stages = re.findall(r"^\d\. \*\*(.+?)\*\*", text, re.M)
    assert len(stages) == 7, stages
    paths = set(re.findall(r"`(tfsent/[\w/.]+)`", text))
    assert paths
    missing = [p for p in sorted(paths) if not os.path.exists(os.path.join(REPO, p))]
    assert not missing, missing
