"""A conformance kit for any incremental detokenizer: puredetok's, an engine's, yours.

It needs ``hypothesis`` (``pip install 'puredetok[testing]'``). In a pytest suite::

    from puredetok.serving import load_tokenizer
    from puredetok.testing import assert_conforms, from_step_function, reference_for, strategies

    TOKENIZER = load_tokenizer()            # or any transformers tokenizer / tokenizers.Tokenizer
    REFERENCE = reference_for(TOKENIZER)    # the oracle: TOKENIZER.decode with these options
    IDS = strategies.token_ids(TOKENIZER)   # build once per module: it reads the vocabulary

    def my_step(ids_so_far, new_id):        # or a factory of objects with step() and finish()
        ...

    def test_my_detokenizer_streams_exactly():
        assert_conforms(from_step_function(my_step), REFERENCE, IDS)

A broken guarantee raises :class:`ConformanceError` (an ``AssertionError``, so pytest shows it)
whose ``violation`` is a minimal counterexample: the guarantee (G1 exact, G2 prefix-safe, G4 no
transient U+FFFD; G3 eager on request), the ids, where it broke, the text sent and the text expected.

After a prompt (contract C: the prompt's text is never sent again), ``assert_continues`` searches
prompts as engines send them (``strategies.prompt_ids``) with outputs::

    PROMPTS = strategies.prompt_ids(TOKENIZER)

    def test_my_detokenizer_continues_a_prompt():
        assert_continues(my_factory, REFERENCE, PROMPTS, IDS)   # my_factory(prompt_ids) -> stream
"""

from __future__ import annotations

try:
    import hypothesis as _hypothesis  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("puredetok.testing needs hypothesis: pip install 'puredetok[testing]'") from error

__all__ = [
    "CONTINUATION_GUARANTEES",
    "ConformanceError",
    "ContinuingFactory",
    "CoreStream",
    "Detokenizer",
    "DetokenizerFactory",
    "FinishFunction",
    "Guarantee",
    "Reference",
    "STREAMING_GUARANTEES",
    "StepFunction",
    "StreamOpener",
    "Violation",
    "assert_conforms",
    "assert_continues",
    "check_continuation",
    "check_ids",
    "core_detokenizer",
    "find_continuation_violation",
    "find_violation",
    "from_step_function",
    "reference_for",
    "strategies",
]

from puredetok.testing import strategies
from puredetok.testing._checks import (
    CONTINUATION_GUARANTEES,
    STREAMING_GUARANTEES,
    ConformanceError,
    Guarantee,
    Reference,
    Violation,
    assert_conforms,
    assert_continues,
    check_continuation,
    check_ids,
    find_continuation_violation,
    find_violation,
    reference_for,
)
from puredetok.testing._detokenizers import (
    ContinuingFactory,
    CoreStream,
    Detokenizer,
    DetokenizerFactory,
    FinishFunction,
    StepFunction,
    StreamOpener,
    core_detokenizer,
    from_step_function,
)

for _public in (ConformanceError, CoreStream, Detokenizer, Guarantee, Reference, StreamOpener, Violation):
    _public.__module__ = __name__  # a pickle names the public path, never the private module
