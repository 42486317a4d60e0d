"""Answers of pure physics functions kept for the inputs a layout search repeats.

A training layout search evaluates some 17,000 fits of one model on each GPU type (13B example), and most of what a
fit computes depends on a handful of its inputs only: the activations of a (layout, micro-batch) do not change with
the data-parallel degree, the GEMM shapes of a micro-batch do not change with the ZeRO stage. Each memo keeps such an
answer under the values it was computed from.

The catalog rows a function reads (a :class:`~clusterplan.catalog.schema.ModelArchitecture`, a ``GpuSpec``, the
``Assumptions``) are frozen; they are keyed by identity (``id``) and held beside the answer, so an ``id`` reused by a
new object is never mistaken for the old one (a hit compares the held objects, ``is`` first, then by value). The rest
of the key is every other value the function reads. What a memo hands back is shared: records nothing changes once
built (frozen, or a FIT_RECORD of :mod:`clusterplan.physics.training`), or tuples the caller copies.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar, TypeVarTuple

V = TypeVar("V")
A = TypeVarTuple("A")

MEMO_KEPT = 4096  # entries before a memo starts again (a search's distinct inputs fit many times over)


class HeldMemo(Generic[V]):
    """A memo keyed by hashable values, each entry holding the frozen objects whose ``id`` its key carries."""

    __slots__ = ("_entries", "_kept")

    def __init__(self, kept: int = MEMO_KEPT) -> None:
        self._entries: dict[Hashable, tuple[tuple[object, ...], V]] = {}
        self._kept = kept
        _MEMOS.append(self)

    def get_or_make(self, key: Hashable, held: tuple[object, ...], make: Callable[[*A], V], *args: *A) -> V:
        """The answer kept under ``key`` for the objects ``held``, else ``make(*args)``'s, kept there (the function
        and its arguments, not a closure: a closure makes every captured argument a cell of the caller, which slowed
        the 13B example's training search by 5%)."""
        hit = self._entries.get(key)
        if hit is not None and hit[0] == held:
            return hit[1]
        value = make(*args)
        if len(self._entries) >= self._kept:
            self._entries.clear()
        self._entries[key] = (held, value)
        return value

    def clear(self) -> None:
        """Forget every answer."""
        self._entries.clear()


_MEMOS: list[HeldMemo[Any]] = []  # every memo made, for clear_memos


def clear_memos() -> None:
    """Forget every memo's answers (tests compare a memoised answer with a fresh computation)."""
    for memo in _MEMOS:
        memo.clear()
