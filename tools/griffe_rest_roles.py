"""A griffe extension for the API reference: Sphinx roles in docstrings become code.

The docstrings cite names the reST way (``:class:`Stream```, ``:func:`~puredetok.start```); the
Markdown pages show them as code (with ``~``, the last part of the name only).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const|type):`(~?)([^`]+)`")


def _code(match: re.Match[str]) -> str:
    name = match.group(2)
    return f"`{name.rsplit('.', 1)[-1] if match.group(1) else name}`"


class RestRoles(griffe.Extension):
    """Rewrites the roles of every docstring as it is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """One object (module, class, function or attribute)."""
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code, obj.docstring.value)
