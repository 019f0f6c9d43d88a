"""Reading order of siblings: the ``order`` key, a decimal number, and the implicit order of the rest.

The nodes directly in one folder (leaves and child levels) are read by their ``order`` key; a node
without one takes its 1-based position among the siblings without one, ordered by (ts, seq, path); ties
go by path. Arithmetic is exact (``decimal.Decimal`` with as many digits as needed), so inserting into
one gap never runs out: a new node goes a fifth of the way from the first neighbour to the second.
Pure: rows in, rows out.
"""

from __future__ import annotations

import decimal
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Protocol, TypeVar


class RowLike(Protocol):
    """A chunk row: ``sqlite3.Row`` or a mapping with at least ``path``, ``ts``, ``seq`` and ``ord``."""

    def __getitem__(self, key: str, /) -> Any: ...


R = TypeVar("R", bound=RowLike)


def ord_of(row: RowLike) -> str | None:
    try:
        value = row["ord"]
    except (IndexError, KeyError):  # a row read from an index that predates the ``order`` key
        return None
    return None if value is None else str(value)


def effective_orders(rows: Iterable[R]) -> list[tuple[Decimal, R]]:
    """Each sibling with its effective order, in reading order: an explicit ``order`` as a Decimal, else
    its 1-based position among the siblings without one by (ts, seq, path); ties by path."""
    items = list(rows)
    implicit = sorted(
        (r for r in items if ord_of(r) is None), key=lambda r: (r["ts"] or "", r["seq"] or 0, r["path"])
    )
    position = {id(r): Decimal(n) for n, r in enumerate(implicit, 1)}
    keyed = [(Decimal(o) if (o := ord_of(r)) is not None else position[id(r)], r) for r in items]
    keyed.sort(key=lambda item: (item[0], item[1]["path"]))
    return keyed


def sibling_order(rows: Iterable[R]) -> list[R]:
    """The nodes of one folder (leaves and child levels) in reading order; see ``effective_orders``."""
    return [row for _, row in effective_orders(rows)]


def _exact(*values: Decimal) -> decimal.Context:
    """A context wide enough that adding, subtracting and dividing by 5 these values is exact."""
    top = max(v.adjusted() for v in values) + 2
    bottom = min(int(v.as_tuple().exponent) for v in values) - 1
    return decimal.Context(prec=max(28, top - bottom + 2), traps=[decimal.Inexact, decimal.InvalidOperation])


def order_between(first: Decimal, second: Decimal) -> Decimal:
    """A fifth of the way from ``first`` to ``second``: room is left on both sides, nothing renumbered."""
    ctx = _exact(first, second)
    return ctx.add(first, ctx.divide(ctx.subtract(second, first), Decimal(5)))


def order_after(last: Decimal) -> Decimal:
    return _exact(last, Decimal(1)).add(last, Decimal(1))


def format_order(value: Decimal) -> str:
    """Plain decimal text without exponent or trailing zeros (``Decimal("3.20")`` -> ``"3.2"``)."""
    if value == 0:
        return "0"
    return format(value.normalize(_exact(value)), "f")


def pins_for(before: Mapping[str, Decimal], after: Sequence[dict[str, Any]]) -> dict[str, Decimal]:
    """Siblings without an ``order`` whose implicit position would change after an operation, with the
    value they had (``before``, by id). Nodes that already had an order keep it; new nodes carry theirs.
    A folder with no explicit order at all needs none: its implicit order is (ts, seq, path) either way."""
    nodes = [dict(n) for n in after]
    pins: dict[str, Decimal] = {}
    while any(n["ord"] is not None for n in nodes):
        moved = {
            n["id"]: before[n["id"]]
            for value, n in effective_orders(nodes)
            if n["ord"] is None and n["id"] in before and value != before[n["id"]]
        }
        if not moved:
            break
        pins.update(moved)
        for n in nodes:
            if n["id"] in moved:
                n["ord"] = format_order(moved[n["id"]])
    return pins
