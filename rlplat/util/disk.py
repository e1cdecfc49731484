"""Failures of the disk or the directory (a full disk, a read-only mount), told apart from the
program's own: what the OS said, and how much room is left."""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

# Failures of the disk or the directory, not of the work: it can go on once they are fixed.
STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}
ERRNO_IN_TEXT = re.compile(r"\[errno (\d+)\]", re.IGNORECASE)
FULL = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))


def storage_reason(error: BaseException | str | None) -> str | None:
    """The OS's words ("No space left on device") when ``error`` (an exception and its causes,
    or the text of a trial's traceback) is a failure of the disk or directory; else None."""
    texts = [error] if isinstance(error, str) else []
    seen: set[int] = set()
    while isinstance(error, BaseException) and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in STORAGE_ERRNOS:
            return os.strerror(error.errno)
        texts.append(str(error))
        error = error.__cause__ or error.__context__
    for text in texts:
        for match in ERRNO_IN_TEXT.finditer(text):
            if int(match.group(1)) in STORAGE_ERRNOS:
                return os.strerror(int(match.group(1)))
    return None


def free_space(path: Path, reason: str) -> str:
    """`` (12.3 MiB free there now)`` where ``reason`` says the disk is full; else ''."""
    if reason not in FULL:
        return ""
    try:
        return f" ({shutil.disk_usage(path).free / 2**20:,.1f} MiB free there now)"
    except OSError:
        return ""
