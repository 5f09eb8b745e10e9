"""Checks of output files named on the command line, made before any work starts. Qt-free."""

from __future__ import annotations

import errno
import os

from ..protocol.errors import UsageError

__all__ = ["check_output_path"]


def check_output_path(path: str, option: str, example: str = "") -> None:
    """Refuse an output file (``--stats-json``, ``--screenshot``, ``-o``) that could not be written.

    Parameters
    ----------
    path
        The file to write.
    option
        The option that named it (for the message).
    example
        A file name to suggest when ``path`` is a directory.

    Raises
    ------
    UsageError
        ``path`` is a directory, its directory is missing or not writable, or the file
        cannot be opened for writing there.
    """
    if not path:
        raise UsageError(f"{option}: the file name is empty" + (f"; give one, e.g. {example}" if example else ""))
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        hint = f", e.g. {path.rstrip('/')}/{example}" if example else ""
        raise UsageError(f"{option} {path!r} is a directory; give a file name{hint}")
    if not os.path.isdir(parent):
        if os.path.lexists(parent):  # `run.log/x.png`: a file where the directory should be
            raise UsageError(f"{option} {path!r}: {parent!r} is not a directory")
        raise UsageError(f"{option} {path!r}: directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path!r}: directory {parent!r} is not writable")
    # The permission bits do not say everything (root passes them; /proc, /sys and read-only mounts refuse
    # a new file anyway): open the file for appending, which changes nothing in one that exists, and
    # remove it again when this made it.
    existed = os.path.lexists(path)
    if existed and not os.path.isfile(path):
        return  # a device (/dev/stdout, /dev/null) or a FIFO: opening it here could block or consume
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        # /proc, /sys: a directory that takes no new file answers "No such file or directory".
        why = "the directory takes no new files" if exc.errno == errno.ENOENT else exc.strerror or str(exc)
        raise UsageError(f"{option} {path!r} cannot be written: {why}") from None
    if not existed:
        try:
            os.unlink(path)
        except OSError:
            pass
