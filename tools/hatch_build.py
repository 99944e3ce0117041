"""The package's description on a package index, made from README.md when the package is built.

README.md opens with the commands of a source checkout (``python3 tasks.py demo`` and ``test``),
and links to the documentation by relative paths, which lead nowhere on an index page. The
description is the README's title and what follows the line :data:`START` in it, each relative
link turned into its text and the path it names (the documentation ships in the source
distribution; the project has no public address to link to), and a last line that says where
those paths are. hatchling runs it as its ``custom`` metadata hook (``pyproject.toml``:
``[tool.hatch.metadata.hooks.custom]``; ``readme`` is dynamic); nothing is added to the build's
dependencies.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hatchling.metadata.plugin.interface import MetadataHookInterface

START = "<!-- The package index's description starts here (tools/hatch_build.py). -->"
"""The line of README.md after which the description goes on (after the title)."""

CLOSING = (
    "The paths named above (`docs/...`, `tests/...`) are files of puredetok's source distribution, "
    "where the documentation ships (`docs/`, built with mkdocs)."
)

_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)")
_ABSOLUTE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _unlinked(match: re.Match[str]) -> str:
    text, target = match.group(1), match.group(2)
    if _ABSOLUTE.match(target):
        return match.group(0)
    path = target.split("#", 1)[0]
    if not path or text.strip("`") == path:
        return f"`{path}`" if path else text
    return f"{text} (`{path}`)"


def description(readme: str) -> str:
    """The package index's description of ``readme`` (README.md's text): its title, then what
    follows :data:`START`, with every relative link outside code blocks made plain text, and
    :data:`CLOSING`. Raises ValueError if the README has no title or no :data:`START` line.
    """
    lines = readme.splitlines()
    if not lines or not lines[0].startswith("# "):
        raise ValueError("README.md does not start with a '# ' title")
    if START not in lines:
        raise ValueError(f"README.md has no line {START!r}")
    body = "\n".join(lines[lines.index(START) + 1 :]).strip("\n").splitlines()
    out, fenced = [lines[0], ""], False
    for line in body:
        if line.lstrip().startswith("```"):
            fenced = not fenced
        out.append(line if fenced else _LINK.sub(_unlinked, line))
    return "\n".join(out).strip("\n") + "\n\n" + CLOSING + "\n"


class ReadmeHook(MetadataHookInterface):
    """Sets the ``readme`` metadata to :func:`description` of the project's README.md."""

    def update(self, metadata: dict[str, Any]) -> None:
        """Set ``metadata["readme"]`` (listed in ``project.dynamic``)."""
        readme = (Path(self.root) / "README.md").read_text(encoding="utf-8")
        metadata["readme"] = {"content-type": "text/markdown", "text": description(readme)}
