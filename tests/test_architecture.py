"""tfsent's structure, as docs/architecture.md states it: no import circle between modules
or between folders (imports made by name counted), library modules never import a
command-line module, nor do tests, benchmarks and tools; every command-line module is thin;
no code uses a moved module's old name; and the architecture doc names every module."""

import ast
import os
import re

from conftest import REPO

# The command-line modules (`python -m tfsent.NAME`): they import the library, never the
# other way round.
CLI_MODULES = {"tfsent.train", "tfsent.evaluate", "tfsent.export", "tfsent.mine",
               "tfsent.index"}
# A command-line module defines flags, checks them and calls the library.
CLI_MAX_LINES = 150
# "tfsent.x.y" or "tfsent.x.y:function" in a string: a module imported by name (a
# registry's writer, `importlib.import_module("tfsent.x")`).
_BY_NAME = re.compile(r"^(tfsent(?:\.\w+)+)(?::\w+)?$")


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


def _moved():
    """tfsent._moved.MOVED, read from its source ({old name: new name})."""
    tree = ast.parse(open(os.path.join(REPO, "tfsent", "_moved.py"), encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "MOVED"
                                                for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("tfsent/_moved.py defines no MOVED table")


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


def imported_names(tree, modules, packages, module=None):
    """The tfsent module names a parsed file imports: `import` statements anywhere (top
    level or inside functions) and names made by string ("tfsent.x", "tfsent.x:func").
    `from package import name` counts as an import of the submodule that defines `name`
    when the package's __init__ only re-exports it (the facade is not a dependency)."""
    targets = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets += [a.name for a in node.names]
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
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _BY_NAME.match(node.value)
            if match:
                targets.append(match.group(1))
    return targets


def _resolve(target, modules, moved):
    """The module a dotted name lands in (an old name: its new module; a name inside a
    module: that module), or None outside tfsent."""
    for old, new in moved.items():
        if target == old or target.startswith(old + "."):
            target = new + target[len(old):]
    while target not in modules and "." in target:
        target = target.rsplit(".", 1)[0]
    return target if target in modules and target.startswith("tfsent") else None


def import_graph():
    """{module: {imported tfsent module}} of the package (see `imported_names`). The alias
    table of moved names (tfsent._moved) is left out: it imports nothing until an old name
    is used, and then only the module that name moved to."""
    modules = _modules()
    moved = _moved()
    packages = {m for m, p in modules.items() if p.endswith("__init__.py")}
    graph = {m: set() for m in modules}
    for module, path in modules.items():
        if module == "tfsent._moved":
            continue
        tree = ast.parse(open(path, encoding="utf-8").read())
        for target in imported_names(tree, modules, packages, module):
            resolved = _resolve(target, modules, moved)
            if resolved and resolved != module:
                graph[module].add(resolved)
    return graph


def folder_of(module):
    """The folder a module belongs to: its sub-package (`tfsent.formats.onnx` ->
    `tfsent.formats`), or the module itself for a top-level module (`tfsent.cli`)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def folder_graph(graph):
    """{folder: {folder it imports}} (the package root `tfsent`, the facade that imports
    every stage for `import tfsent`, is left out; imports within a folder are not edges)."""
    folders = {}
    for module, targets in graph.items():
        if module == "tfsent":
            continue
        source = folder_of(module)
        folders.setdefault(source, set())
        for target in targets:
            if target != "tfsent" and folder_of(target) != source:
                folders[source].add(folder_of(target))
                folders.setdefault(folder_of(target), set())
    return folders


def find_cycles(graph):
    """The strongly connected components with more than one node (Tarjan)."""
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


def _outside_files():
    """The Python files of tests/, benchmarks/ and tools/."""
    for top in ("tests", "benchmarks", "tools"):
        for folder, _, names in os.walk(os.path.join(REPO, top)):
            for name in sorted(names):
                if name.endswith(".py"):
                    yield os.path.join(folder, name)


def test_find_cycles_on_a_hand_made_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert find_cycles(graph) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_imports_made_by_name_are_edges():
    modules = {"tfsent.a": "", "tfsent.b": "", "tfsent.c": "", "tfsent.c.d": ""}
    tree = ast.parse("import importlib\n"
                     "W = 'tfsent.b:write'\n"
                     "def f():\n    return importlib.import_module('tfsent.c.d')\n"
                     "S = 'tfsent is a package'\n")
    assert imported_names(tree, modules, set()) == ["importlib", "tfsent.b", "tfsent.c.d"]
    assert _resolve("tfsent.old.x", modules, {"tfsent.old": "tfsent.c"}) == "tfsent.c"
    assert folder_graph({"tfsent.c.d": {"tfsent.a"}, "tfsent.a": {"tfsent.c"},
                         "tfsent.c": set()}) == {"tfsent.c": {"tfsent.a"},
                                                 "tfsent.a": {"tfsent.c"}}


def test_no_import_circles_between_modules():
    cycles = find_cycles(import_graph())
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_import_circles_between_folders():
    cycles = find_cycles(folder_graph(import_graph()))
    assert not cycles, "folder circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_library_modules_never_import_a_command_line_module():
    bad = [f"{module} imports {target}" for module, targets in import_graph().items()
           for target in targets if target in CLI_MODULES and module not in CLI_MODULES]
    assert not bad, "\n".join(bad)


def test_tests_benchmarks_and_tools_never_import_a_command_line_module():
    """They import the library; a command runs in a subprocess (`python -m tfsent.X`)."""
    modules = _modules()
    packages = {m for m, p in modules.items() if p.endswith("__init__.py")}
    bad = []
    for path in _outside_files():
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            bad += [f"{os.path.relpath(path, REPO)}:{node.lineno} imports {name}"
                    for name in names if name in CLI_MODULES]
    assert not bad, "\n".join(bad)
    assert packages  # the scan saw the package


def test_command_line_modules_are_thin():
    modules = _modules()
    long = {m: sum(1 for _ in open(modules[m], encoding="utf-8")) for m in CLI_MODULES}
    assert all(n <= CLI_MAX_LINES for n in long.values()), long


def test_no_code_uses_a_moved_module_name():
    """The old names of tfsent._moved.MOVED are for users' code only."""
    moved = _moved()
    modules = _modules()
    assert all(new in modules for new in moved.values()), [
        n for n in moved.values() if n not in modules]
    assert not [old for old in moved if old in modules], "an old name still has a file"
    packages = {m for m, p in modules.items() if p.endswith("__init__.py")}
    bad = []
    for path in list(modules.values()) + list(_outside_files()):
        if path.endswith(os.path.join("tfsent", "_moved.py")) or path.endswith(
                os.path.join("tests", "test_moved_names.py")):
            continue
        tree = ast.parse(open(path, encoding="utf-8").read())
        for name in imported_names(tree, modules, packages):
            if any(name == old or name.startswith(old + ".") for old in moved):
                bad.append(f"{os.path.relpath(path, REPO)} uses {name}")
    assert not bad, "\n".join(sorted(set(bad)))


def _doc():
    return open(os.path.join(REPO, "docs", "architecture.md"), encoding="utf-8").read()


def doc_paths(text):
    """The repository paths a text names in backticks: a full path (`tfsent/x/y.py`, a
    folder `tfsent/x/`), or a file name (`y.py`) standing for that file in the folder named
    last before it (each stage's paragraph names its folder, then its files)."""
    paths, folder = [], None
    for token in re.findall(r"`([^`\s]+)`", text):
        if re.fullmatch(r"tfsent/[\w/.]*", token):
            paths.append(token)
            if token.endswith("/"):
                folder = token
        elif re.fullmatch(r"\w+\.py", token) and folder:
            paths.append(folder + token)
    return paths


def test_doc_paths_resolve_file_names_in_the_last_folder():
    text = ("`tfsent/a/`: `x.py`, `tfsent/b.py`, `y.py`, `--flag`, "
            "`tfsent/a/c/`: `x.py`")
    assert doc_paths(text) == ["tfsent/a/", "tfsent/a/x.py", "tfsent/b.py", "tfsent/a/y.py",
                               "tfsent/a/c/", "tfsent/a/c/x.py"]


def test_the_architecture_doc_names_every_module_and_only_real_paths():
    text = _doc()
    stages = re.findall(r"^\d\. \*\*(.+?)\*\*", text, re.M)
    assert len(stages) == 7, stages
    named = set(doc_paths(text))
    missing = [p for p in sorted(named) if not os.path.exists(os.path.join(REPO, p))]
    assert not missing, f"named in docs/architecture.md, not in the repo: {missing}"
    unnamed = []
    for module, path in sorted(_modules().items()):
        rel = os.path.relpath(path, REPO).replace(os.sep, "/")
        if module == "tfsent" or rel.endswith("/__init__.py") and \
                rel[:-len("__init__.py")] in named:
            continue
        if rel not in named:
            unnamed.append(rel)
    assert not unnamed, f"modules docs/architecture.md does not name: {unnamed}"
