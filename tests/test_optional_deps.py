"""Optional dependencies: without tensorflow-datasets (the `tfds` extra) every `tfds:` training
source stops with a ConfigError naming the source and the install line.

The missing package is simulated in a child process: a sitecustomize on its PYTHONPATH sets
sys.modules["tensorflow_datasets"] = None, so `import tensorflow_datasets` raises ImportError
there exactly as it does where the package is not installed."""

import json
import os
import subprocess
import sys

from conftest import REPO

INSTALL_LINE = 'pip install "tfsent[tfds]"'

# Each `tfds:` reader entry point; prints {source: (error class, message)}.
READERS_SCRIPT = r"""
import json, sys
from tfsent.data import readers
calls = {
    "tfds:wikipedia:text": lambda: readers.read_training_sentences("tfds:wikipedia:text"),
    "tfds:snli": lambda: readers.read_nli_triplets("tfds:snli"),
    "tfds:multi_nli": lambda: readers.read_nli_pairs("tfds:multi_nli"),
    "tfds:anli": lambda: readers.read_positive_pairs("tfds:anli"),
}
out = {}
for source, call in calls.items():
    try:
        call()
        out[source] = ("no error", "")
    except Exception as e:  # noqa: BLE001  (the parent checks the class)
        out[source] = (type(e).__name__, str(e))
json.dump(out, sys.stdout)
"""


def _env_without_tfds(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\nsys.modules['tensorflow_datasets'] = None  # as if not installed\n")
    path = os.pathsep.join([str(site), REPO, os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="2")


def test_tfds_sources_without_tensorflow_datasets_name_the_install_line(tmp_path):
    env = _env_without_tfds(tmp_path)
    r = subprocess.run([sys.executable, "-c", READERS_SCRIPT], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    for source, (kind, message) in json.loads(r.stdout).items():
        assert kind == "ConfigError", (source, kind, message)
        assert repr(source) in message and INSTALL_LINE in message, message


def test_paper_recipe_on_tfds_without_tensorflow_datasets_stops_with_a_config_error(tmp_path):
    """configs/simcse_sup.py trains on tfds:multi_nli: the CLI exits 2 with the message (no
    traceback) before any model is loaded."""
    env = _env_without_tfds(tmp_path)
    r = subprocess.run([sys.executable, "-m", "tfsent.train", "--method=simcse_sup",
                        "--config=configs/simcse_sup.py", f"--output_dir={tmp_path / 'run'}"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "error: train_data='tfds:multi_nli'" in r.stderr and INSTALL_LINE in r.stderr
    assert "Traceback" not in r.stderr
