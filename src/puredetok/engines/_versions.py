"""What an engine plugin says of the engine's version when it starts to decode, and how it reads
the engine's methods to tell whether they are the ones it was made for.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import logging
from typing import Any


def installed(engine: str) -> str:
    """``"<engine> <version>"`` of the installed distribution, or says the version is unknown."""
    try:
        return f"{engine} {importlib.metadata.version(engine)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{engine}, version unknown"


def announce(
    logger: logging.Logger, engine: str, tested: tuple[str, ...], using: str, fits: str, off: str
) -> None:
    """Log that the plugin decodes (``using``): at INFO on a tested version of ``engine``, else a
    warning naming the version as untested, why it is used anyway (``fits``) and the variable
    ``off`` that turns it off.
    """
    version = installed(engine)
    if version.removeprefix(f"{engine} ") in tested:
        logger.info("puredetok: %s", using)
    else:
        logger.warning(
            "puredetok: %s; %s was not tested (%s were), %s (%s=0 turns it off)",
            using,
            version,
            ", ".join(tested),
            fits,
            off,
        )


def parameters(method: Any) -> list[str] | None:
    """The names of a function's parameters after ``self`` or ``cls`` if it has one (None: not a
    function).
    """
    function = method.__func__ if isinstance(method, classmethod) else method
    if not inspect.isfunction(function):
        return None
    names = list(inspect.signature(function).parameters)
    return names[1:] if names and names[0] in ("self", "cls") else names
