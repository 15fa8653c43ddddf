"""Where given token ids sit in a batch's completions, found in one pass over the padded id tensor.

A trainer hands its completions twice: as lists of ids (what the reward functions see) and as the right-padded
``[rows, width]`` tensor built from them. Searching every list in Python costs a few microseconds per thousand
ids; one comparison over the tensor costs a few per row. The positions are read back from the tensor only when
it can be those lists (as many rows, wide enough, each row's first and last id where the list has them, each
found id where the list has it); otherwise the caller searches the lists itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def id_positions(
    padded: torch.Tensor, rows: Sequence[Sequence[int]], wanted: Sequence[int]
) -> list[list[tuple[int, int]]] | None:
    """Per row of ``rows``, ``(position, id)`` of every id in ``wanted``, in order; None when ``padded`` does not
    hold ``rows`` right-padded (the caller then searches the lists).

    One host transfer for the batch (the found positions and the rows' end ids), on the tensor's device.
    """
    n = len(rows)
    if padded.dim() != 2 or padded.size(0) != n or padded.is_floating_point() or not wanted:
        return None
    lengths = [len(row) for row in rows]
    if n == 0:
        return []
    width = padded.size(1)
    if max(lengths) > width:
        return None
    hit = padded == int(wanted[0])
    for token in wanted[1:]:
        hit |= padded == int(token)
    row_of, col_of = hit.nonzero(as_tuple=True)
    found = int(row_of.numel())
    index = torch.tensor([max(k - 1, 0) for k in lengths], device=padded.device).unsqueeze(1)
    ends = torch.cat([padded[:, :1], padded.gather(1, index)], dim=1).reshape(-1) if width else padded.new_empty(0)
    flat = torch.cat([row_of, col_of, padded[row_of, col_of], ends]).tolist()
    for r, (row, k) in enumerate(zip(rows, lengths, strict=True)):
        if k and (flat[3 * found + 2 * r] != row[0] or flat[3 * found + 2 * r + 1] != row[k - 1]):
            return None
    out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for r, c, token in zip(flat[:found], flat[found : 2 * found], flat[2 * found : 3 * found], strict=True):
        if c < lengths[r]:
            if rows[r][c] != token:
                return None
            out[r].append((c, token))
    return out
