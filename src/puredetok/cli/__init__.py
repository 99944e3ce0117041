"""The ``puredetok`` command line: ``explain``, ``bench``, ``replay``, ``serve`` and ``audit``.

``replay`` and ``audit`` come with puredetok-audit (``pip install 'puredetok[audit]'``), through
the ``puredetok.commands`` entry points; without it they say what to install.

Exit codes: 0 success, 1 the command ran and found a failure (a mismatch), 2 bad usage or input
(unknown option, missing tokenizer, unreadable or empty file, bad records; 2 wins over 1). Errors
are one line on stderr, the whole message, never a traceback; an error about a place in a file
names it as compilers do (``FILE:LINE: ...``). ``puredetok --version`` prints the installed
version. Every command says which tokenizer it loaded (:mod:`puredetok.cli._loaded`).
"""

from __future__ import annotations

__all__ = ["main", "version"]

from puredetok.cli._main import main, version
