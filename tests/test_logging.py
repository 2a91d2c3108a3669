"""One logging system in the package: absl. Program output of the CLIs stays print()."""

import ast
import os

from conftest import REPO

# The CLI entry points print their result (tests and scripts read it from stdout), and so
# does the run `python -m tfsent.train` calls.
PRINT_ALLOWED = {("tfsent/train.py", "main"), ("tfsent/evaluate.py", "_evaluate_from_flags"),
                 ("tfsent/export.py", "main"), ("tfsent/training/loop.py", "run"),
                 ("tfsent/mine.py", "main"), ("tfsent/cli.py", "fail"),
                 ("tfsent/index.py", "main"), ("tfsent/cli.py", "interrupted")}
# The FutureWarning of a moved module's old name (and of a deprecated function) is a
# Python warning (warning filters and `-W error` see it), not a log line.
WARNINGS_ALLOWED = {"tfsent/_moved.py", "tfsent/formats/__init__.py"}


def _package_files():
    root = os.path.join(REPO, "tfsent")
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, REPO), path


def test_only_absl_logging_and_cli_prints():
    problems = []
    for rel, path in _package_files():
        tree = ast.parse(open(path, encoding="utf-8").read(), filename=rel)
        functions = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for child in ast.walk(node):
                    functions.setdefault(id(child), node.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                problems += [f"{rel}:{node.lineno} import {a.name}" for a in node.names
                             if a.name == "logging" or a.name == "warnings"
                             and rel not in WARNINGS_ALLOWED]
            elif isinstance(node, ast.ImportFrom) and node.module in ("logging", "warnings"):
                problems.append(f"{rel}:{node.lineno} from {node.module} import")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "print":
                if (rel, functions.get(id(node))) not in PRINT_ALLOWED:
                    problems.append(f"{rel}:{node.lineno} print() outside a CLI entry point")
    assert not problems, "\n".join(problems)
