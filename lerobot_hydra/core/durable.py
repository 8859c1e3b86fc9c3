"""Files that are either complete or absent, and that survive a power cut once written.

A file is written under a unique temporary name in its own directory (so concurrent writers never share
one), fsynced, renamed over the target (atomic on POSIX: a reader sees the old or the new content, never a
mix), and the directory is fsynced so that the rename itself is on disk.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

TMP_SUFFIX = ".tmp"


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(tmp: Path, path: Path) -> None:
    """Pushes the finished file `tmp` to disk and renames it to `path` (same directory)."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def temporary_path(path: Path, suffix: str = TMP_SUFFIX) -> Path:
    """A new, empty, uniquely named hidden file beside `path`, for writing `path`'s next content (created with
    the permissions the umask gives any new file, unlike tempfile's private 0600)."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}{suffix}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp


def write_text_atomic(path: Path, text: str) -> None:
    tmp = temporary_path(path)
    try:
        tmp.write_text(text, encoding="utf-8")
        replace_durably(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any, indent: int | None = 2) -> None:
    # Strict JSON: NaN and Infinity are not JSON; an undefined value is None (null).
    write_text_atomic(path, json.dumps(data, indent=indent, allow_nan=False))


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object from `path`; ValueError when the file is not one (torn, edited, another kind of file)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"not UTF-8 text: {err}") from err
    except json.JSONDecodeError as err:
        raise ValueError(str(err)) from err
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")
    return data


def remove_temporaries(directory: Path, suffix: str = TMP_SUFFIX) -> list[Path]:
    """Deletes the temporary files a killed writer left in `directory` (call it only while no one writes there)."""
    removed = []
    for path in directory.glob(f".*{suffix}"):
        if path.is_file():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
