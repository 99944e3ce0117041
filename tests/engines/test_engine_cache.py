"""The engine plugins' identity-keyed cache (``engines/_cache.py``): what the vLLM plugin keeps
of a codec's stop tables and of a tokenizer's strings."""

from __future__ import annotations

import functools
import threading

from puredetok.engines._cache import IdentityCache


class Owner:
    """An object compared by value, as a tokenizer or codec may be: the cache must not care."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Owner)

    def __hash__(self) -> int:
        return 0


def test_a_value_is_made_once_per_owner_and_key() -> None:
    cache: IdentityCache[list[int]] = IdentityCache(4)
    owner, made = Owner(), []

    def make() -> list[int]:
        made.append(1)
        return [len(made)]

    first = cache.get(owner, "a", make)
    assert cache.get(owner, "a", make) is first
    assert cache.get(owner, "b", make) == [2]
    assert made == [1, 1]


def test_an_equal_object_does_not_get_another_ones_value() -> None:
    cache: IdentityCache[str] = IdentityCache(4)
    one, other = Owner(), Owner()
    assert cache.get(one, (), lambda: "one") == "one"
    assert cache.get(other, (), lambda: "other") == "other"
    assert cache.get(one, (), lambda: "again") == "one"


def test_the_least_recently_used_is_dropped_past_the_bound() -> None:
    cache: IdentityCache[int] = IdentityCache(2)
    owner = Owner()
    cache.get(owner, 1, lambda: 1)
    cache.get(owner, 2, lambda: 2)
    cache.get(owner, 1, lambda: -1)  # 1 is now the most recent
    cache.get(owner, 3, lambda: 3)
    assert len(cache) == 2
    assert cache.get(owner, 1, lambda: -1) == 1
    assert cache.get(owner, 2, lambda: -2) == -2  # was dropped, so made again


def test_a_none_value_is_kept_like_any_other() -> None:
    cache: IdentityCache[None] = IdentityCache(2)
    calls: list[None] = []
    owner = Owner()
    cache.get(owner, (), lambda: calls.append(None))
    cache.get(owner, (), lambda: calls.append(None))
    assert calls == [None]


def test_threads_share_one_cache_within_its_bound() -> None:
    cache: IdentityCache[int] = IdentityCache(8)
    owners = [Owner() for _ in range(4)]
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for n in range(2000):
                key = (seed * n) % 13
                assert cache.get(owners[n % 4], key, functools.partial(int, key)) == key
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in (1, 3, 5, 7)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(cache) <= 8
