"""Writing output files: whole or not at all, and a group of files (a ``.pte`` and its
``.ptd``) all or none. Every file-system failure is an ``OutputError`` naming the path."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Iterable

from ..errors import OutputError


def write_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file, so no partial file is ever left.
    The file gets the permissions ``open`` would give a new file (0666 less the umask), not
    the temporary file's owner-only ones."""
    return write_all([(path, data)])[0]


def write_all(files: Iterable[tuple[str | os.PathLike, bytes]]) -> list[Path]:
    """Write each ``(path, data)``, all or none: every file goes to a temporary beside it,
    then all are renamed into place; on any failure every path is left as it was (a
    replaced file is restored from a link to its old contents)."""
    files = [(Path(p), data) for p, data in files]
    temps: list[Path] = []
    backups: dict[Path, Path | None] = {}
    try:
        for path, data in files:
            check_output(path)
            temps.append(_temporary(path, data))
        for path, _ in files:
            backups[path] = _backup(path)
        placed = []
        try:
            for (path, _), tmp in zip(files, temps):
                with _naming(path):
                    os.replace(tmp, path)
                placed.append(path)
        except BaseException:
            for path in placed:  # put the old files back (or remove the new ones)
                with contextlib.suppress(OSError):
                    if backups[path] is not None:
                        os.replace(backups.pop(path), path)
                    else:
                        path.unlink()
            raise
    finally:
        for leftover in (*temps, *(b for b in backups.values() if b is not None)):
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)
    return [path for path, _ in files]


def check_output(path: str | os.PathLike) -> Path:
    """``path`` when a file can be written there (its folder exists or can be made, and the
    OS lets this process write in it), else OutputError saying why; writes nothing."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"cannot write '{path}': it is a folder")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"cannot write '{path}': '{folder}' is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK,
                     effective_ids=os.access in os.supports_effective_ids):
        raise OutputError(f"cannot write '{path}': the folder '{folder}' is not writable "
                          "(permission denied)")
    return path


def check_outputs(*paths) -> None:
    """``check_output`` on each path given (None: none asked for), before any work starts."""
    for path in paths:
        if path is not None:
            check_output(path)


@contextlib.contextmanager
def _naming(path: Path):
    """Raise an OSError inside the block as an OutputError naming ``path`` and the cause."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        raise OutputError(f"cannot write '{path}': {exc.strerror or exc}") from exc


def _temporary(path: Path, data: bytes) -> Path:
    """``data`` in a new temporary file beside ``path``, with a new file's permissions."""
    with _naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with _naming(path), os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~_umask())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _backup(path: Path) -> Path | None:
    """A second name for ``path``'s current contents (a hard link, or a copy where the file
    system has none), to restore it from; None when there is no file at ``path``."""
    if not path.is_file():
        return None
    backup = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.old")
    with _naming(path):
        try:
            os.link(path, backup)
        except OSError:
            shutil.copy2(path, backup)
    return backup


def _umask() -> int:
    """The process's umask (read by setting it, then restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
