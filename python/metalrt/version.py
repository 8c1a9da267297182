"""The installed metalrt's version."""
from __future__ import annotations

import importlib.metadata


def package_version() -> str:
    """The installed distribution's version (importlib.metadata), "unknown" when metalrt
    runs from a source tree that was never installed."""
    try:
        return importlib.metadata.version("metalrt")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
