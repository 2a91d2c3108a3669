"""README.md and docs/*.md name only command-line flags and config fields that exist.

A `--flag` on a command (`python -m tfsent.train ...`, `python benchmarks/X.py ...`, in a
code block or an inline code span) must be one that command defines; a `--flag` in a code
span with no command before it must be defined by some tfsent command, benchmark or tool
(or be one of FOREIGN_FLAGS, other programs' flags the docs mention). Every
`--config.FIELD` must be a config field: a base default or some method's default.
Flags are read from the scripts' source (every `flags.DEFINE_*("name", ...)` call, and the
flags a `cli.define_model_flags(...)` call defines), since tfsent.evaluate, tfsent.export
and tfsent.mine define theirs only when run as a program.
"""

import ast
import glob
import os
import re

from conftest import REPO

DOCUMENTS = ["README.md"] + sorted(
    os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))
TFSENT_COMMANDS = ("train", "evaluate", "export", "mine", "index")
# Flags of programs that are not tfsent's, named in the docs: flag -> whose.
FOREIGN_FLAGS = {
    "no-deps": "pip install",
    "dist": "pytest-xdist",
    "durations": "pytest",
    "xla_cpu_compilation_enabled": "TF Serving's tensorflow_model_server",
    "enable_batching": "TF Serving's tensorflow_model_server",
    "batching_parameters_file": "TF Serving's tensorflow_model_server",
    "enable_model_warmup": "TF Serving's tensorflow_model_server",
}
_ABSL_FLAGS = {"help", "helpfull", "helpshort", "helpxml", "flagfile", "undefok",
               "logtostderr", "alsologtostderr", "verbosity", "v", "log_dir",
               "stderrthreshold", "only_check_args"}


def config_fields():
    """Every config field `--config.FIELD` may name: the base defaults plus every method's
    defaults. (The one place this test reads the method registry.)"""
    from tfsent.training.config import BASE_DEFAULTS
    from tfsent.methods import REGISTRY

    fields = set(BASE_DEFAULTS)
    for name in REGISTRY:
        fields |= set(REGISTRY[name].defaults)
    return fields


def model_flags(**options):
    """Names of the flags `tfsent.cli.define_model_flags(**options)` defines."""
    from absl import flags

    from tfsent import cli

    flag_values = flags.FlagValues()
    cli.define_model_flags(flag_values, **options)
    return set(flag_values)


def script_flags(path):
    """Names of the absl flags a script defines (`*.DEFINE_*("name", ...)` calls, and the
    shared ones of a `cli.define_model_flags(...)` call, its literal options applied)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = getattr(node.func, "attr", getattr(node.func, "id", ""))
        if (function.startswith("DEFINE") and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
        elif function == "define_model_flags":
            names |= model_flags(**{k.arg: ast.literal_eval(k.value) for k in node.keywords})
        elif function in RERANKER_FLAG_HELPERS:
            names |= helper_flags(function, [a.value for a in node.args
                                             if isinstance(a, ast.Constant)])
    return names


# tfsent.evaluation.rerank's helpers that define a command's cross-encoder flags.
RERANKER_FLAG_HELPERS = ("define_reranker_flags", "define_rerank_flags")


def helper_flags(function, args):
    """Names of the flags `tfsent.evaluation.rerank.<function>(*args)` defines."""
    from absl import flags

    from tfsent.evaluation import rerank

    flag_values = flags.FlagValues()
    getattr(rerank, function)(*args, flag_values=flag_values)
    return set(flag_values)


def command_script(command):
    """The source file of `tfsent.train` / `benchmarks/x.py` / `tools/x.py`."""
    if command.startswith("tfsent."):
        return os.path.join(REPO, "tfsent", command.split(".", 1)[1] + ".py")
    return os.path.join(REPO, command)


def code_texts(markdown):
    """The text of every fenced code block (continuation lines joined) and inline code
    span (line breaks inside a span become spaces), one string each."""
    texts = []
    rest = []
    for i, part in enumerate(re.split(r"^```[^\n]*\n", markdown, flags=re.M)):
        if i % 2:  # inside a fence
            texts.extend(part.replace("\\\n", " ").split("\n"))
        else:
            rest.append(part)
    for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", "\n".join(rest)):
        texts.append(span.replace("\n", " "))
    return texts


_COMMAND = re.compile(r"(?:python3? -m )?(tfsent\.(?:train|evaluate|export|mine))(?![\w.])"
                      r"|python3? ((?:benchmarks|tools)/\w+\.py)")
_FLAG = re.compile(r"(?<![\w-])--([A-Za-z][\w.-]*?)(?=$|[=\s\]\)\[,`'\"]|\.\s|\.$)")


def flag_uses(text):
    """(command or None, flag) for every `--flag` in one code text: the command is the
    tfsent module or script whose invocation precedes the flag, None when the flag
    stands alone, "other" when it belongs to another program (pip, saved_model_cli, ...)."""
    uses = []
    for segment in re.split(r"&&|\|\||;|\s\|\s|\s#", text):
        owner = None
        words = segment.split()
        if words and not words[0].startswith("-") and not _COMMAND.match(segment.strip()):
            if re.match(r"[a-z_][\w.]*$", words[0]) and words[0] not in ("python", "python3"):
                owner = "other"  # pip, saved_model_cli, tensorboard, TF_CONFIG=...
        position = 0
        for match in _COMMAND.finditer(segment):
            uses += [(owner, f) for f in _FLAG.findall(segment[position:match.start()])]
            owner = match.group(1) or match.group(2)
            position = match.end()
        uses += [(owner, f) for f in _FLAG.findall(segment[position:])]
    return uses


def unknown_names(markdown, fields, flags_of, all_flags):
    """Problems in one document: flags its commands do not define, config fields that do
    not exist. `flags_of(command)` -> that command's flag names."""
    problems = []
    for text in code_texts(markdown):
        for owner, flag in flag_uses(text):
            if owner == "other":
                continue
            if flag.startswith("config."):
                field = flag[len("config."):]
                if field.isupper():  # the placeholder FIELD
                    continue
                if field not in fields:
                    problems.append(f"--config.{field}: no such config field ({text!r})")
                continue
            known = flags_of(owner) if owner else all_flags | set(FOREIGN_FLAGS)
            known = known | _ABSL_FLAGS
            bare = flag[2:] if flag.startswith("no") else flag  # absl's --noFLAG
            if flag not in known and bare not in known:
                where = owner or "any tfsent command, benchmark or tool"
                problems.append(f"--{flag}: not a flag of {where} ({text!r})")
    return problems


def _flag_table():
    scripts = [f"tfsent.{c}" for c in TFSENT_COMMANDS] + [
        os.path.relpath(p, REPO) for p in sorted(glob.glob(os.path.join(REPO, "benchmarks", "*.py"))
                                                  + glob.glob(os.path.join(REPO, "tools", "*.py")))]
    table = {s: script_flags(command_script(s)) for s in scripts}
    table["tfsent.train"] = table["tfsent.train"] | {"config"}
    return table


def test_docs_name_existing_flags_and_config_fields():
    fields = config_fields()
    table = _flag_table()
    all_flags = set().union(*table.values())

    def flags_of(command):
        assert command in table, f"the docs run {command}, which does not exist"
        return table[command]

    problems = []
    for doc in DOCUMENTS:
        text = open(os.path.join(REPO, doc), encoding="utf-8").read()
        problems += [f"{doc}: {p}" for p in unknown_names(text, fields, flags_of, all_flags)]
    assert not problems, "\n".join(problems)


def test_checker_reports_unknown_flags_and_fields():
    """The checker itself: a made-up field, a flag of another command, a made-up flag."""
    doc = ("Run\n\n```\npython -m tfsent.train --method=scd --config.scd_alpha=0.1 \\\n"
           "    --config.no_such_field=1 --output_dir=D\n"
           "python -m tfsent.evaluate --model=D --pairs=x.tsv\n```\n\n"
           "and `--not_a_flag_anywhere`, `--config.FIELD=VALUE`, `pip install --no-deps x`.\n")
    table = _flag_table()

    problems = unknown_names(doc, config_fields(), table.__getitem__,
                             set().union(*table.values()))
    assert len(problems) == 3, problems
    assert "--config.no_such_field" in problems[0]
    assert "--pairs: not a flag of tfsent.evaluate" in problems[1]
    assert "--not_a_flag_anywhere" in problems[2]


def test_cited_methods_sections_exist():
    """Every `docs/methods.md "SECTION"` cited in the code names a heading of that file."""
    methods = open(os.path.join(REPO, "docs", "methods.md"), encoding="utf-8").read()
    headings = set(re.findall(r"^## (.+)$", methods, flags=re.M))
    cited = {}
    for folder in ("tfsent", "tests", "benchmarks", "tools", "configs"):
        for path in glob.glob(os.path.join(REPO, folder, "**", "*.py"), recursive=True):
            text = open(path, encoding="utf-8").read()
            if os.path.samefile(path, __file__):
                continue
            for section in re.findall(r'docs/methods\.md \(?"([^"]+)"', text):
                cited.setdefault(" ".join(section.split()), os.path.relpath(path, REPO))
    assert cited, "no citation of docs/methods.md found"
    missing = {s: where for s, where in cited.items() if s not in headings}
    assert not missing, f"cited sections without a heading in docs/methods.md: {missing}"


def _anchor(heading):
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces ->
    hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_relative_links_resolve():
    """Every relative link of README.md and docs/*.md names an existing file, and its
    #anchor a heading of that file."""
    problems = []
    for doc in DOCUMENTS:
        text = open(os.path.join(REPO, doc), encoding="utf-8").read()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(REPO, os.path.dirname(doc), path)) if path \
                else os.path.join(REPO, doc)
            if not os.path.exists(full):
                problems.append(f"{doc}: {target}: no such file")
                continue
            if anchor and full.endswith(".md"):
                body = open(full, encoding="utf-8").read()
                anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", body, flags=re.M)}
                if anchor not in anchors:
                    problems.append(f"{doc}: {target}: no heading with that anchor")
    assert not problems, "\n".join(problems)


def _code_block_after(text, heading):
    """The first fenced code block after the Markdown heading `heading`, as lines."""
    section = text.split(f"\n{heading}\n", 1)[1]
    return section.split("```", 2)[1].strip().splitlines()


def test_ci_runs_the_readme_install_and_test_commands():
    """.ci/run installs with README's "Install" line and runs exactly its "Test" command."""
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    ci = [line.strip() for line in open(os.path.join(REPO, ".ci", "run"), encoding="utf-8")]
    install = _code_block_after(readme, "## Install")
    test = _code_block_after(readme, "## Test")
    assert len(test) == 1 and test[0].startswith("python -m pytest"), test
    assert ci[-1] == test[0], (ci[-1], test[0])
    for line in install:
        if line.startswith("pip install"):  # .ci/run adds pip's -q (quiet)
            assert line in [c.replace(" -q ", " ") for c in ci], f"README's install line {line!r} is not what .ci/run runs"
