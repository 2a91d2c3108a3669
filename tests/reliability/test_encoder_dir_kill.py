"""A process killed (SIGKILL) while it replaces a tfsent encoder directory: the next load
finds a complete encoder, whichever step the kill interrupted."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, TINY_VOCAB

# Runs in a fresh interpreter: saves the encoder NEW over DIR with `save_encoder_dir`, with
# the process killing itself (SIGKILL, no cleanup of any kind) just before file-system call
# number KILL_AT (os.rename or shutil.rmtree, counted in order, once the new version is
# written in its staging folder).
KILLER = r"""
import os, shutil, signal, sys
from tfsent.encoders import load_encoder

new, directory, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
encoder = load_encoder(new)
calls = [0]

def dying(real):
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call

os.rename = dying(os.rename)
shutil.rmtree = dying(shutil.rmtree)
encoder.save_encoder_dir(directory)
print("finished")
"""


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory):
    """Two tiny encoders with different weights, saved as tfsent directories."""
    from tfsent.testing import tiny_encoder

    root = tmp_path_factory.mktemp("versions")
    paths = []
    for seed in (1, 2):
        path = str(root / f"v{seed}")
        tiny_encoder(TINY_VOCAB, max_seq_length=8, seed=seed).save_encoder_dir(path)
        paths.append(path)
    return paths


def _embedding(path):
    from tfsent.encoders import load_encoder

    return load_encoder(path).encode(["a man plays a guitar", "the dog runs"])


@pytest.fixture(scope="module")
def version_embeddings(two_versions):
    """The embeddings each of `two_versions` gives (those folders are only read), by
    path: computed once for the module instead of a load in every comparison."""
    return {path: _embedding(path) for path in two_versions}


# Call 1: directory -> staging/old; call 2: staging/new -> directory; call 3: removal of
# the staging folder. A kill at call 1 leaves the old version in place; later, the new.
@pytest.mark.parametrize("kill_at", [1, 2, 3])
def test_kill_while_replacing_an_encoder_dir(tmp_path, two_versions, version_embeddings,
                                             kill_at):
    old, new = two_versions
    directory = str(tmp_path / "encoder")
    shutil.copytree(old, directory)
    r = subprocess.run([sys.executable, "-c", KILLER, new, directory, str(kill_at)],
                       cwd=REPO, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == -9 and "finished" not in r.stdout, r.stderr[-2000:]
    left = sorted(os.listdir(tmp_path))  # killed between the renames: no encoder folder
    assert left[0].startswith(".encoder.tfsent-staging-") and left[1:] == (
        [] if kill_at == 2 else ["encoder"]), left
    # The next load recovers: the old version before the first rename, else the complete
    # new one (flushed before the first rename); the staging folder is removed.
    expected = old if kill_at == 1 else new
    np.testing.assert_array_equal(_embedding(directory), version_embeddings[expected])
    assert sorted(os.listdir(tmp_path)) == ["encoder"]
    # A later save over it works and cleans up.
    from tfsent.encoders import load_encoder

    load_encoder(new).save_encoder_dir(directory)
    assert sorted(os.listdir(tmp_path)) == ["encoder"]
    np.testing.assert_array_equal(_embedding(directory), version_embeddings[new])


def test_an_old_folder_beside_an_encoder_is_never_touched(tmp_path, two_versions,
                                                         version_embeddings):
    """tfsent before its staging markers deleted `X.old` beside `X` on every load of X."""
    from tfsent.encoders import load_encoder

    old, new = two_versions
    directory = tmp_path / "mymodel"
    shutil.copytree(old, directory)
    (tmp_path / "mymodel.old").mkdir()
    (tmp_path / "mymodel.old" / "IMPORTANT.txt").write_text("keep")
    load_encoder(str(directory))
    load_encoder(new).save_encoder_dir(str(directory))
    assert (tmp_path / "mymodel.old" / "IMPORTANT.txt").read_text() == "keep"
    np.testing.assert_array_equal(_embedding(str(directory)), version_embeddings[new])


def test_save_refuses_a_folder_that_is_not_an_encoder_dir(tmp_path, two_versions):
    from tfsent.encoders import load_encoder
    from tfsent.errors import ConfigError

    target = tmp_path / "hf_checkpoint"
    target.mkdir()
    (target / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a tfsent encoder directory"):
        load_encoder(two_versions[1]).save_encoder_dir(str(target))
    assert sorted(os.listdir(target)) == ["config.json"]
    assert sorted(os.listdir(tmp_path)) == ["hf_checkpoint"]


def test_a_symlinked_encoder_dir_keeps_working(tmp_path, two_versions, version_embeddings):
    from tfsent.encoders import load_encoder

    old, new = two_versions
    real = tmp_path / "real"
    shutil.copytree(old, real)
    link = tmp_path / "link"
    link.symlink_to(real)
    load_encoder(new).save_encoder_dir(str(link))
    assert link.is_symlink()
    np.testing.assert_array_equal(_embedding(str(link)), version_embeddings[new])
    load_encoder(old).save_encoder_dir(str(link))  # and again
    np.testing.assert_array_equal(_embedding(str(link)), version_embeddings[old])
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]
