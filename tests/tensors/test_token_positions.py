"""id_positions: the tag ids of right-padded completion rows from one pass over the tensor, or None when the
tensor is not those rows."""

from __future__ import annotations

import random

import pytest
import torch

from rl_guards.tensors.token_positions import id_positions

OPEN, CLOSE, PAD = 7, 8, 0


def search(rows: list[list[int]], wanted: tuple[int, ...]) -> list[list[tuple[int, int]]]:
    return [[(i, t) for i, t in enumerate(row) if t in wanted] for row in rows]


def right_padded(rows: list[list[int]], pad: int = PAD, extra: int = 3) -> torch.Tensor:
    width = max((len(r) for r in rows), default=0) + extra
    out = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def random_rows(seed: int, n: int = 24) -> list[list[int]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        row = [rng.randrange(1, 50) for _ in range(rng.randrange(0, 40))]
        for _ in range(rng.randrange(0, 4)):  # tags anywhere: first, last, repeated, close before open
            if row:
                row[rng.randrange(len(row))] = rng.choice((OPEN, CLOSE))
        rows.append(row)
    return rows


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("pad", [PAD, OPEN])  # a pad id that is a tag id is padding, not a tag
def test_positions_match_a_search_of_the_lists(seed: int, pad: int) -> None:
    rows = random_rows(seed)
    rows[0] = [OPEN, 3, CLOSE]  # tags at both ends of a row
    assert id_positions(right_padded(rows, pad), rows, (OPEN, CLOSE)) == search(rows, (OPEN, CLOSE))


def test_tensor_exactly_as_wide_and_empty_batches() -> None:
    rows = [[OPEN, 1, CLOSE], [2, 2, 2], []]
    assert id_positions(right_padded(rows, extra=0), rows, (OPEN, CLOSE)) == [[(0, OPEN), (2, CLOSE)], [], []]
    assert id_positions(torch.zeros((0, 5), dtype=torch.long), [], (OPEN, CLOSE)) == []
    assert id_positions(torch.zeros((2, 0), dtype=torch.long), [[], []], (OPEN, CLOSE)) == [[], []]


def test_not_these_rows_gives_none() -> None:
    rows = [[OPEN, 1, 2, CLOSE, 5], [3, 4]]
    good = right_padded(rows)
    assert id_positions(good, rows, (OPEN, CLOSE)) is not None
    assert id_positions(good[:1], rows, (OPEN, CLOSE)) is None  # fewer rows
    assert id_positions(good, [*rows, [1]], (OPEN, CLOSE)) is None  # more rows
    assert id_positions(good[:, :3], rows, (OPEN, CLOSE)) is None  # narrower than a row
    assert id_positions(good.float(), rows, (OPEN, CLOSE)) is None  # not ids
    assert id_positions(good[0], rows, (OPEN, CLOSE)) is None  # not [rows, width]
    assert id_positions(good, rows, ()) is None
    left = torch.full_like(good, PAD)  # left-padded: the rows' ends are elsewhere
    for i, row in enumerate(rows):
        left[i, left.size(1) - len(row) :] = torch.tensor(row)
    assert id_positions(left, rows, (OPEN, CLOSE)) is None
    shifted = [[OPEN, 1, 2, 9, 5], [3, 4]]  # the tensor has a tag where the list has none
    assert id_positions(good, shifted, (OPEN, CLOSE)) is None
    other_end = [[OPEN, 1, 2, CLOSE, 6], [3, 4]]
    assert id_positions(good, other_end, (OPEN, CLOSE)) is None
