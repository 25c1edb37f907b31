"""Writing a profile file: atomically, so a reader never sees half a document."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_profile(doc: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(doc, handle, indent=1)
            handle.write("\n")
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a profile is meant to be shared
        os.replace(tmp, target)
    except BaseException:
        with_suppressed_unlink(tmp)
        raise
    return target


def with_suppressed_unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
