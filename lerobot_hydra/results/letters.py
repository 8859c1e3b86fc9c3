"""The compact letter display of many pairwise tests: each policy gets letters, and two policies that share a letter
are not significantly different.

No maintained Python library computes it (statsmodels' `multipletests` adjusts the p-values, nothing there assigns
letters), so this is Piepho's insert-and-absorb algorithm (Piepho 2004, J. Comput. Graph. Stat. 13(2), 456-466):
start from one letter shared by all; for each significant pair, split every letter both hold into one without
either of them; then drop every letter whose holders are a subset of another letter's holders.
"""

from __future__ import annotations

import string
from collections.abc import Collection, Sequence


def compact_letters(order: Sequence[str], differ: Collection[tuple[str, str]]) -> dict[str, str]:
    """Letters for each name in `order` (best first: 'a' goes to the letter held by the earliest name), given the
    pairs that differ significantly."""
    columns: list[set[str]] = [set(order)]
    for a, b in differ:
        split: list[set[str]] = []
        for column in columns:
            if a in column and b in column:
                split += [column - {a}, column - {b}]
            else:
                split.append(column)
        columns = _absorb(split)
    rank = {name: i for i, name in enumerate(order)}
    columns.sort(key=lambda c: sorted(rank[n] for n in c))
    alphabet = string.ascii_lowercase + string.ascii_uppercase
    return {name: "".join(alphabet[i] for i, column in enumerate(columns) if name in column) for name in order}


def _absorb(columns: list[set[str]]) -> list[set[str]]:
    """The columns that are not a subset of another (of identical ones, the first)."""
    kept: list[set[str]] = []
    for i, column in enumerate(columns):
        others = [c for j, c in enumerate(columns) if j != i]
        larger = any(column < c for c in others)
        duplicate = any(column == c for c in columns[:i])
        if column and not larger and not duplicate:
            kept.append(column)
    return kept
