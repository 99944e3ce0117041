"""How every option's value is checked alike (``flag``, ``whole``, ``choice``): a value of the
wrong type is an :class:`~puredetok.errors.OptionTypeError` naming the option, never taken for its
truth value; a number out of its range a :class:`ValueError` naming it.
"""

from __future__ import annotations

import operator
from typing import Final, SupportsIndex, cast

from puredetok.errors import OptionTypeError

MAX_INT: Final = 2**63 - 1
"""The largest token id, token limit or count any option or message takes: the largest int a
saved state holds (:mod:`puredetok._core.saving` writes signed 64-bit ints), so that whatever a
request was opened with, a stopping worker can hand it back."""


def flag(name: str, value: object) -> bool:
    """``value``, which must be a bool (an :class:`OptionTypeError` naming ``name`` if not)."""
    if type(value) is not bool:
        raise OptionTypeError(f"{name} must be True or False, not {type(value).__name__} {value!r:.60}")
    return value


def optional_flag(name: str, value: object) -> bool | None:
    """``value``, which must be a bool or None."""
    return None if value is None else flag(name, value)


def whole(name: str, value: object, low: int, high: int = MAX_INT) -> int:
    """``value`` as an int in ``[low, high]``: it must be an int or an integer type's value (a
    NumPy int; never a bool), else an :class:`OptionTypeError`; out of range, a :class:`ValueError`;
    each naming ``name``.
    """
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise OptionTypeError(f"{name} must be an int, not {type(value).__name__} {value!r:.60}")
    number = operator.index(cast(SupportsIndex, value))
    if number < low:
        raise ValueError(f"{name} must be {'a positive int' if low == 1 else f'>= {low}'}, not {number}")
    if number > high:
        why = " (2**63 - 1: the largest int a saved state holds)" if high == MAX_INT else ""
        raise ValueError(f"{name} must be <= {high}{why}, not {number}")
    return number


def optional_whole(name: str, value: object, low: int, high: int = MAX_INT) -> int | None:
    """``value``, which must be None or an int in ``[low, high]`` (see :func:`whole`)."""
    return None if value is None else whole(name, value, low, high)


def choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """``value``, which must be one of the strings ``choices`` (an :class:`OptionTypeError` if it
    is not a string, a :class:`ValueError` if it is another one, each naming ``name``).
    """
    expected = f"{name} must be {' or '.join(map(repr, choices))}"
    if type(value) is not str:
        raise OptionTypeError(f"{expected}, not {type(value).__name__} {value!r:.60}")
    if value not in choices:
        raise ValueError(f"{expected}, not {value!r:.60}")
    return value
