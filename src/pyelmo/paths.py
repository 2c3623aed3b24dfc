"""Where pyelmo keeps downloaded packages and computed caches."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir(kind: str, env: str) -> Path:
    """``$ENV`` if set, else ``~/.cache/pyelmo/KIND``."""
    value = os.environ.get(env)
    return Path(value).expanduser() if value else Path.home() / ".cache" / "pyelmo" / kind
