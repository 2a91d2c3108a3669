"""Writing files and folders so that nothing a user owns is lost or silently replaced.

Every folder tfsent writes in place of a user-visible one (an encoder directory, an export
version, a published model) is first built in a *staging folder* beside its target,
named `.<target>.tfsent-staging-<pid>`, holding a marker file (`MARKER_FILE`) that tfsent
wrote and that names the target, the host and the writing process. Only marked staging
folders are ever recovered or removed, and only when their process is this one or is
gone (same host); a folder without the marker, or another live process's, is left alone.

Replacing an existing target moves it INTO the staging folder (`old/`) before the new
version (`new/`) is renamed into place, so at every instant either the target or a
marked staging folder holds a complete version; `recover` (run before every load and
write of a target) finishes a swap a crash interrupted. Files and folders are fsynced
before each rename, so a completed write survives a power cut, not only a killed process.
A target that is a symlink is written through: the folder it points to is replaced and
the link is kept.
"""

import contextlib
import json
import os
import shutil
import socket
import time

from tfsent.errors import ConfigError

MARKER_FILE = "tfsent-staging.json"
_STAGING_INFIX = ".tfsent-staging-"
_FILE_INFIX = ".tfsent-tmp-"


# --------------------------------------------------------------------------------------
# Durability
# --------------------------------------------------------------------------------------

def fsync_path(path):
    """Flushes one file or directory to disk (directories: their entries)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root):
    """Flushes every file and directory under `root`, files first, `root` last."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                fsync_path(path)
        fsync_path(folder)


def write_file_atomic(path, data):
    """Writes `data` (str or bytes) to `path` through a temporary sibling that is fsynced
    and renamed over it: readers see the old content or the new, never a torn file."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}{_FILE_INFIX}{os.getpid()}")
    try:
        with open(tmp, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.remove(tmp)
        raise
    fsync_path(folder)


def is_temporary_file(name):
    """True for the name of `write_file_atomic`'s temporary sibling (`.NAME.tfsent-tmp-PID`),
    which a killed process leaves behind."""
    head, infix, pid = name.rpartition(_FILE_INFIX)
    return bool(infix) and head.startswith(".") and pid.isdigit()


def write_json_atomic(path, data):
    """`write_file_atomic` of `data` as indented JSON."""
    write_file_atomic(path, json.dumps(data, indent=2) + "\n")


def commit_file(tmp, path):
    """Moves a finished temporary file `tmp` (written by the caller in `path`'s folder)
    over `path`, fsyncing the file before and the folder after the rename."""
    fsync_path(tmp)
    os.replace(tmp, path)
    fsync_path(os.path.dirname(os.path.abspath(path)))


def temp_file_for(path, suffix=""):
    """A temporary file name beside `path` owned by this process (for `commit_file`);
    `suffix` keeps an extension that a writer insists on (e.g. ".npy")."""
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    return os.path.join(folder, f".{os.path.basename(path)}{_FILE_INFIX}{os.getpid()}{suffix}")


# --------------------------------------------------------------------------------------
# Staging folders
# --------------------------------------------------------------------------------------

def resolve_target(target):
    """The real folder a target path names: a symlink is followed (its folder is what gets
    written; the link is kept), trailing slashes dropped."""
    target = os.path.abspath(os.fspath(target)).rstrip("/") or "/"
    return os.path.realpath(target) if os.path.islink(target) else target


def staging_path(target, pid=None):
    """The staging folder of `target` for process `pid` (default: this one)."""
    parent, base = os.path.split(target)
    return os.path.join(parent, f".{base}{_STAGING_INFIX}{pid or os.getpid()}")


def read_marker(folder):
    """The marker dict of a tfsent staging folder, or None when `folder` has none (then it
    is not tfsent's to touch)."""
    try:
        with open(os.path.join(folder, MARKER_FILE)) as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and marker.get("tfsent") == 1 else None


def _write_marker(folder, target, purpose, **extra):
    marker = {"tfsent": 1, "target": os.path.basename(target), "purpose": purpose,
              "host": socket.gethostname(), "pid": os.getpid(), "created": time.time(),
              **extra}
    write_json_atomic(os.path.join(folder, MARKER_FILE), marker)


def _process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _abandoned(marker):
    """True if the process that wrote `marker` is this one or has ended on this host."""
    if marker.get("host") != socket.gethostname():
        return False  # another machine's (shared filesystem): not ours to judge
    pid = marker.get("pid")
    return isinstance(pid, int) and (pid == os.getpid() or not _process_alive(pid))


def staging_folders(target):
    """The marked staging folders beside `target` that belong to it: (path, marker)."""
    parent, base = os.path.split(target)
    prefix = f".{base}{_STAGING_INFIX}"
    found = []
    if not os.path.isdir(parent):
        return found
    for name in sorted(os.listdir(parent)):
        path = os.path.join(parent, name)
        if name.startswith(prefix) and os.path.isdir(path) and not os.path.islink(path):
            marker = read_marker(path)
            if marker is not None and marker.get("target") == base:
                found.append((path, marker))
    return found


def recover(target):
    """Finishes or rolls back a replacement of `target` that a crash interrupted, then
    removes its abandoned staging folders (marked, and of this process or of a process
    that has ended on this host). Returns True if anything was done.

    Target missing while a staging folder holds the old version: the crash came between
    the two renames; the complete new version (marker `complete`) is moved into place, or
    else the old version is moved back. Unmarked folders and live processes' staging
    folders are never touched."""
    target = resolve_target(target)
    acted = False
    for path, marker in staging_folders(target):
        if not _abandoned(marker):
            continue
        new, old = os.path.join(path, "new"), os.path.join(path, "old")
        if not os.path.lexists(target):
            if marker.get("complete") and os.path.isdir(new) and os.path.isdir(old):
                os.rename(new, target)
            elif os.path.isdir(old):
                os.rename(old, target)
            fsync_path(os.path.dirname(target))
        shutil.rmtree(path)
        acted = True
    return acted


@contextlib.contextmanager
def staged_dir(target, purpose, replace=None):
    """Builds a folder that takes the place of `target` once complete.

    Yields an empty folder to write into (inside a marked staging folder beside the
    target). On a clean exit the folder is fsynced and renamed to `target`; on an
    exception it is removed and `target` is untouched.

    Args:
        target: the folder to create or replace (a symlink is written through).
        purpose: what is written, for the marker and messages ("encoder directory").
        replace: None: `target` must not exist, or be an empty folder. Otherwise a
            callable `replace(target)` that raises ConfigError unless `target` is a folder
            tfsent may replace (e.g. `is a tfsent encoder directory`); the old version is
            removed only after the new one is in place.
    """
    target = resolve_target(target)
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    recover(target)
    _check_replaceable(target, purpose, replace)
    stage = staging_path(target)
    os.makedirs(stage)
    _write_marker(stage, target, purpose)
    new = os.path.join(stage, "new")
    os.makedirs(new)
    try:
        yield new
        fsync_tree(new)
        _write_marker(stage, target, purpose, complete=True)
        fsync_path(stage)
        _check_replaceable(target, purpose, replace)  # unchanged while we wrote?
        old = os.path.join(stage, "old")
        try:  # from the first rename on: any exception (Ctrl-C too) puts the old one back
            if os.path.isdir(target) and os.listdir(target):
                os.rename(target, old)
                fsync_path(stage)
            elif os.path.isdir(target):
                os.rmdir(target)  # an empty folder (checked above)
            os.rename(new, target)
        except BaseException:
            if os.path.isdir(old) and not os.path.lexists(target):
                os.rename(old, target)  # put the old version back
            raise
        fsync_path(parent)
    finally:
        # The stage goes unless it still holds the only copy (interrupted again while the
        # old version was put back): then `recover(target)` finishes the swap.
        if os.path.lexists(target) or not os.path.isdir(os.path.join(stage, "old")):
            shutil.rmtree(stage, ignore_errors=True)


def _check_replaceable(target, purpose, replace):
    if not os.path.lexists(target):
        return
    if not os.path.isdir(target):
        raise ConfigError(f"{target} exists and is not a folder; the {purpose} is written "
                          f"as a new folder: remove it or choose another path")
    if not os.listdir(target):
        return
    if replace is None:
        raise ConfigError(f"{target} already exists and is not empty; the {purpose} is "
                          f"written to a new or empty folder: choose another path")
    replace(target)


def check_new_file(path, flag, overwrite=False, inputs=(), input_dirs=()):
    """Refuses to write the file `path` when it names a folder (an existing one, or a
    path ending in a separator), when it exists (unless `overwrite`), when it is one of
    `inputs`, or when it is an existing file inside one of the folders `input_dirs` (the
    command's data: never replaced, whatever `overwrite` says). `flag` names the option
    in the message."""
    path = os.fspath(path)
    if path.endswith((os.sep, "/")) or os.path.isdir(path):
        raise ConfigError(f"{flag}={path} names a folder; give the path of a file")
    real = os.path.realpath(path)
    for source in inputs:
        if source and os.path.exists(source) and os.path.realpath(source) == real:
            raise ConfigError(f"{flag}={path} is also an input ({source}); write the output "
                              f"to another file")
    if os.path.lexists(path):
        for folder in input_dirs:
            if folder and os.path.isdir(folder) and real.startswith(
                    os.path.join(os.path.realpath(folder), "")):
                raise ConfigError(f"{flag}={path} is also an input (a file of the folder "
                                  f"{folder}); write the output to another file")
    if os.path.lexists(path) and not overwrite:
        raise ConfigError(f"{flag}={path} already exists; choose a new file or pass "
                          f"--overwrite to replace it")
