"""``CLIPTokenizer``: a byte-level BPE whose tokens end words with ``</w>``. The class wraps its
backend's ``decode``: the byte-level text has every ``</w>`` replaced by a space and is then
stripped of whitespace at both ends (``str.strip``). Held back: a proper prefix of ``</w>`` and
trailing whitespace (until text follows it).
"""

from __future__ import annotations

from typing import Any

from puredetok._build.backend_model import backend_parts
from puredetok._build.compile import compile_chain
from puredetok._core.decoders.base import Stage, Unmodelled
from puredetok._core.decoders.cleanup import cleanup_stages
from puredetok._core.decoders.fuse import GlueStage
from puredetok._core.decoders.replace import ReplaceStage
from puredetok._core.decoders.whitespace import StripStage
from puredetok._build.pyclasses.base import ClassModel

_WRAPPER = "CLIPTokenizer._wrap_decode_method_backend_tokenizer.<locals>.new_decode_method"


def _wrapped_suffix(backend: Any) -> str:
    """The suffix CLIP's wrapper of ``backend.decode`` replaces; Unmodelled if the wrapper is not
    CLIP's own around the backend's own ``decode``.
    """
    wrapper = vars(backend).get("decode")
    if wrapper is None or getattr(wrapper, "__qualname__", "") != _WRAPPER:
        raise Unmodelled("a CLIPTokenizer whose backend decode is not CLIP's own wrapper")
    cells = dict(zip(wrapper.__code__.co_freevars, (c.cell_contents for c in wrapper.__closure__ or ())))
    original = cells.get("orig_decode_method")
    suffix = cells.get("end_of_word_suffix")
    if getattr(original, "__self__", None) is not backend or getattr(original, "__name__", "") != "decode":
        raise Unmodelled("a CLIPTokenizer whose wrapper does not wrap its backend's decode")
    if not isinstance(suffix, str) or not suffix:
        raise Unmodelled(f"a CLIPTokenizer wrapper with the suffix {suffix!r}")
    return suffix


def clip_model(tokenizer: Any, *, skip: bool, cleanup: bool, max_byte_run: int | None) -> ClassModel:
    """The model of a ``CLIPTokenizer``."""
    backend = tokenizer.backend_tokenizer
    if "decode_batch" in vars(backend):
        raise Unmodelled("a CLIPTokenizer whose backend decode_batch is replaced")
    suffix = _wrapped_suffix(backend)
    parts = backend_parts(backend, skip, max_byte_run, suffix_undone=True)
    tail: list[Stage] = [GlueStage(), ReplaceStage(((suffix, " "),)), StripStage()]
    if cleanup:
        tail.extend(cleanup_stages())
    chain = compile_chain(parts.decoders, parts.tokens, tail)
    description = f"CLIP: {parts.names}, {suffix!r} to a space, strip" + (" + cleanup" if cleanup else "")
    return ClassModel("clip", description, chain, parts.tokens, fast_oracle=False)
