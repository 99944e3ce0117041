"""One base exception: every exception class puredetok (and puredetok-audit) defines sits under
:class:`puredetok.PuredetokError` and keeps the built-in base it had (docs/guarantees.md, G7)."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil

import pytest

import puredetok
import puredetok_audit
from puredetok import PuredetokError
from puredetok.errors import InvalidTokenError, OptionTypeError, StateTypeError
from puredetok.worker._addresses import AddressError

OPTIONAL = ("puredetok.engines.vllm", "puredetok.engines.sglang", "puredetok.engines._vllm_derender")
"""Modules that import an engine (not installed in the test environment)."""


def _exception_classes() -> set[type[BaseException]]:
    found: set[type[BaseException]] = set()
    walks = [
        pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
        for package in (puredetok, puredetok_audit)
    ]
    for info in (info for walk in walks for info in walk):
        if info.name in OPTIONAL or info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError as error:  # an optional dependency: say which, never skip silently
            pytest.fail(f"{info.name} does not import: {error}")
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__.startswith("puredetok"):
                found.add(value)
    return found


def test_every_exception_the_package_defines_is_a_puredetok_error() -> None:
    classes = _exception_classes()
    assert len(classes) >= 20  # the walk found the package's errors (19 under the base today)
    assert {cls.__qualname__ for cls in classes if not issubclass(cls, PuredetokError)} == set()


def test_the_built_in_bases_are_kept_and_errors_still_pickle() -> None:
    assert issubclass(InvalidTokenError, ValueError) and issubclass(StateTypeError, TypeError)
    assert issubclass(OptionTypeError, TypeError) and issubclass(OptionTypeError, ValueError)
    assert issubclass(AddressError, OSError)
    for error in (InvalidTokenError(-1, 10, 3), AddressError("port in use")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
    with pytest.raises(PuredetokError, match="must be True or False"):
        puredetok.StopRules(ignore_eos="false")  # type: ignore[arg-type]
