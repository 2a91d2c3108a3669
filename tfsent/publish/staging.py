"""The staging step every publish writer goes through: the target must be new (absent or an
empty directory), the files are written into a temporary sibling, and the sibling is renamed
into place only when complete; a failed write leaves nothing behind. Also the JSON and
safetensors writers every format shares."""

import contextlib
import json
import os
import shutil

import safetensors.numpy

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
def staged_dir(directory):
    """Yields a new, empty temporary sibling of `directory` to write into; when the block
    completes, the sibling replaces `directory` (absent or empty: `check_export_target`),
    and when it raises, the sibling is removed."""
    directory = check_export_target(directory)
    parent = os.path.dirname(directory)
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(directory)}.tmp-{os.getpid()}")
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    try:
        yield tmp
        if os.path.isdir(directory):  # empty (checked above)
            os.rmdir(directory)
        os.rename(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


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
