"""A process killed (SIGKILL) while it replaces a tfsent encoder directory: the next load
finds a complete encoder, whichever step the kill interrupted."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, TINY_VOCAB

# Runs in a fresh interpreter: swaps NEW into DIR with `_atomic_replace_dir`, with the
# process killing itself (SIGKILL, no cleanup of any kind) just before file-system call
# number KILL_AT (os.rename or shutil.rmtree, counted in order).
KILLER = r"""
import os, shutil, signal, sys
from tfsent.encoders import encoder_dir

new, directory, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
calls = [0]

def dying(real):
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call

tmp = directory + ".tmp-save"  # where save_encoder_dir writes the new version
shutil.copytree(new, tmp)  # complete, as save_encoder_dir leaves it before the swap
os.rename = dying(os.rename)
shutil.rmtree = dying(shutil.rmtree)
encoder_dir._atomic_replace_dir(tmp, directory)
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


# Call 1: directory -> .old; call 2: staging -> directory; call 3: removal of .old. (A kill
# before call 1 leaves the old directory untouched.)
@pytest.mark.parametrize("kill_at", [2, 3])
def test_kill_while_replacing_an_encoder_dir(tmp_path, two_versions, kill_at):
    old, new = two_versions
    directory = str(tmp_path / "encoder")
    shutil.copytree(old, directory)
    r = subprocess.run([sys.executable, "-c", KILLER, new, directory, str(kill_at)],
                       cwd=REPO, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == -9 and "finished" not in r.stdout, r.stderr[-2000:]
    # The next load recovers: the complete new version (staged before the first rename).
    np.testing.assert_array_equal(_embedding(directory), _embedding(new))
    assert sorted(os.listdir(tmp_path)) == ["encoder"]
    # A later save over it works and cleans up.
    from tfsent.encoders import load_encoder

    load_encoder(new).save_encoder_dir(directory)
    assert sorted(os.listdir(tmp_path)) == ["encoder"]
    np.testing.assert_array_equal(_embedding(directory), _embedding(new))
