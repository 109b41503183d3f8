"""Files an operator command writes for people to read: whole or not at all, with a clear error."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from reprocess.errors import ConfigError


def publish_file(out: Path, text: str, replace: bool, mode: int | None = None) -> None:
    """Write ``text`` to ``out`` whole or not at all: a temporary file beside it, synced, then renamed over it
    (``replace``) or linked to its name, which fails if the name exists, even when made meanwhile. The file's mode is
    ``mode`` (default 0666) less the umask, as a file created with it would have; the temporary file is owner-only
    until then. Any error is a
    :class:`ConfigError` naming ``out``, and leaves no temporary file."""
    from reprocess.storage.commit import fsync_dir

    if out.name in ("", ".", ".."):
        raise ConfigError("not a file name", file=str(out))
    if out.is_dir():  # with --force, the rename over it failed with "Is a directory"
        raise ConfigError("is a folder; give a file name", file=str(out))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot make its folder: {exc.strerror or exc}", file=str(out)) from exc
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, (0o666 if mode is None else mode) & ~_umask())
        if replace:
            os.replace(tmp, out)
        else:
            try:
                os.link(tmp, out)
            except FileExistsError:
                raise ConfigError("exists; give --force to replace it", file=str(out)) from None
        fsync_dir(out.parent)
    except OSError as exc:
        raise ConfigError(f"cannot write: {exc.strerror or exc}", file=str(out)) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
