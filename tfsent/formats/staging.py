"""Where every export is written: the one staging step and the one version counter.

Two kinds of target (`ExportFormat.versioned`):
- a new directory (sentence_transformers, huggingface, keras_hub, onnx, litert): it must be
  new (absent or an empty directory; `check_new_target`), the files are written into a
  staging folder beside it and renamed into place when complete (`staged_dir`);
- a folder of integer versions (TF Serving's layout: tf_saved_model, search_index; and a
  training run's extra formats, OUTPUT_DIR/export_<format>/<version>): each export adds the
  next version (`next_version`, `new_version_path`), itself a new directory written
  through `staged_dir`.
Both are built on `tfsent.fsio.staged_dir` (a marked staging folder, fsynced before the
rename): a failed or killed write leaves nothing a server or a loader would pick up.
Also the JSON and safetensors writers every format shares.
"""

import contextlib
import os
import re

from tfsent import fsio
# The JSON and safetensors writers of every export, where the Hugging Face files are written.
from tfsent.encoders.huggingface.writing import write_json, write_safetensors  # noqa: F401
from tfsent.errors import ConfigError

_STAGED_VERSION = re.compile(r"\.(\d+)\.tfsent-staging-\d+")


def check_new_target(directory, option="--export_dir"):
    """The absolute path of `directory`; ConfigError (naming `option`) unless it is absent
    or an empty directory (an export never overwrites another)."""
    directory = os.path.abspath(os.fspath(directory))
    if os.path.exists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
        raise ConfigError(f"{option}={directory} exists and is not an empty directory; "
                          "choose a new directory (an export never overwrites another)")
    return directory


def check_versions_parent(parent, option="--export_dir"):
    """ConfigError (naming `option`) when `parent`, a folder of versions, is a file."""
    parent = os.fspath(parent)
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise ConfigError(f"{option}={parent} exists and is not a folder (it holds the "
                          "versions of an export)")
    return parent


check_export_target = check_new_target  # its name in tfsent.publish.staging


@contextlib.contextmanager
def staged_dir(directory, purpose):
    """Yields an empty folder to write the `purpose` (e.g. "onnx export") into; when the
    block completes, the folder takes the place of `directory` (which must be new:
    `check_new_target`), and when it raises, nothing is left behind."""
    directory = check_new_target(directory)
    with fsio.staged_dir(directory, purpose) as folder:
        yield folder


def next_version(parent):
    """The next integer version under `parent`: one more than the highest integer-named
    entry (1 when there is none or `parent` does not exist)."""
    parent = os.fspath(parent)
    names = os.listdir(parent) if os.path.isdir(parent) else []
    return max((int(n) for n in names if re.fullmatch(r"\d+", n)), default=0) + 1


def new_version_path(parent, version=None):
    """`PARENT/<version>` for a new export (default: `next_version`), after removing the
    abandoned staging folders of killed exports there. ConfigError when `parent` is a file
    or the version exists. Creates `parent` if needed."""
    parent = check_versions_parent(parent, "export directory")
    os.makedirs(parent, exist_ok=True)
    _remove_abandoned_staging(parent)
    version = next_version(parent) if version is None else int(version)
    final = os.path.join(parent, str(version))
    if os.path.exists(final):
        raise ConfigError(f"export version {version} already exists at {final}")
    return final


def _remove_abandoned_staging(parent):
    """Removes the staging folders of killed exports in `parent` (marked by tfsent, of a
    process that has ended on this host); anything else there is left alone."""
    for name in os.listdir(parent):
        match = _STAGED_VERSION.fullmatch(name)
        if match:
            fsio.recover(os.path.join(parent, match.group(1)))
