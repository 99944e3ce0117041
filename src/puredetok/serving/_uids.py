"""The shapes in which calls take request ids, checked where they are given.

A call that takes several uids (``DetokenizeManager.abort``) takes a collection of them:
:data:`Uids`. A bare ``str`` or ``bytes`` is refused with a ``TypeError`` rather than iterated
(``abort("xy")`` would otherwise abort the requests ``"x"`` and ``"y"`` and leave ``"xy"``
streaming), and ``mypy --strict`` rejects it already, because :data:`Uids` names the collection
types one by one instead of ``Iterable[Uid]``, which a ``str`` satisfies. A call that takes one
uid (the clients' ``abort``) takes an ``int`` or a ``str`` and refuses anything else.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from typing import Any, TypeAlias

from puredetok.serving._messages import Uid

Uids: TypeAlias = (
    list[int] | list[str] | list[Uid] | tuple[Uid, ...] | AbstractSet[Uid] | Iterator[Uid] | range
)
"""Several request ids: a list, tuple, set, frozenset, a dict's keys, a range or an iterator (a
generator); never a bare ``str`` or ``bytes``. For one request, pass ``[uid]``."""


def check_uid(uid: Any) -> Uid:
    """``uid`` itself if it is a request id (an ``int`` other than a bool, or a ``str``); else a
    ``TypeError`` that names what was given.
    """
    if isinstance(uid, bool) or not isinstance(uid, int | str):
        raise TypeError(f"a uid is an int or a str, got {type(uid).__name__} {uid!r:.60}")
    return uid


def uid_list(uids: Uids) -> list[Uid]:
    """The uids of a collection (see :data:`Uids`), each checked with :func:`check_uid`.

    Raises ``TypeError`` for a bare ``str``, ``bytes``, ``bytearray`` or ``memoryview``: one
    uid is passed as ``[uid]``.
    """
    given: Any = uids
    if isinstance(given, str | bytes | bytearray | memoryview):
        raise TypeError(
            f"uids must be a collection of uids (a list, tuple or set), got the {type(given).__name__} "
            f"{given!r:.60}: for one request pass [{given!r:.60}]"
        )
    try:
        items = list(given)
    except TypeError:
        raise TypeError(f"uids must be a collection of uids, got {type(given).__name__}") from None
    return [check_uid(uid) for uid in items]
