"""A conformance kit for any incremental detokenizer: puredetok's, an engine's, yours.

It needs ``hypothesis`` (``pip install 'puredetok[testing]'``). In a pytest suite::

    from puredetok.adapters.loading import load_tokenizer
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
"""

from __future__ import annotations

try:
    import hypothesis as _hypothesis  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("puredetok.testing needs hypothesis: pip install 'puredetok[testing]'") from error

__all__ = [
    "ConformanceError",
    "CoreStream",
    "Detokenizer",
    "DetokenizerFactory",
    "FinishFunction",
    "Guarantee",
    "Reference",
    "STREAMING_GUARANTEES",
    "StepFunction",
    "Violation",
    "assert_conforms",
    "check_ids",
    "core_detokenizer",
    "find_violation",
    "from_step_function",
    "reference_for",
    "strategies",
]

from puredetok.testing import strategies
from puredetok.testing.checks import (
    STREAMING_GUARANTEES,
    ConformanceError,
    Guarantee,
    Reference,
    Violation,
    assert_conforms,
    check_ids,
    find_violation,
    reference_for,
)
from puredetok.testing.detokenizers import (
    CoreStream,
    Detokenizer,
    DetokenizerFactory,
    FinishFunction,
    StepFunction,
    core_detokenizer,
    from_step_function,
)
