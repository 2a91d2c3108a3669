"""The staging step every publish writer goes through: the target must be new (absent or an
empty directory), the files are written into a staging folder beside it (`tfsent.fsio`),
which is renamed into place only when complete; a failed write leaves nothing behind. Also
the JSON and safetensors writers every format shares."""

import contextlib
import json
import os

import safetensors.numpy

from tfsent import fsio
from tfsent.errors import ConfigError


def check_export_target(directory):
    """The absolute path of `directory`; ConfigError unless it is absent or an empty
    directory (an export never overwrites another)."""
    directory = os.path.abspath(os.fspath(directory))
    if os.path.exists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
        raise ConfigError(f"--export_dir={directory} exists and is not an empty directory; "
                          "choose a new directory (an export never overwrites another)")
    return directory


@contextlib.contextmanager
def staged_dir(directory, purpose):
    """Yields an empty folder to write the `purpose` (e.g. "sentence_transformers export")
    into; when the block completes, the folder takes the place of `directory` (which must
    be absent or empty: `check_export_target`), and when it raises, nothing is left
    behind. Built on `tfsent.fsio.staged_dir` (a marked staging folder beside the target,
    fsynced before the rename)."""
    directory = check_export_target(directory)
    with fsio.staged_dir(directory, purpose) as folder:
        yield folder


def write_json(path, data):
    """Writes `data` as indented UTF-8 JSON with a final newline (every JSON file the
    publish writers produce)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_safetensors(path, tensors):
    """Writes {name: array} as a safetensors file marked for PyTorch (`format: pt`, what
    transformers and sentence-transformers expect)."""
    safetensors.numpy.save_file(tensors, path, metadata={"format": "pt"})
