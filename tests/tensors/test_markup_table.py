"""The prompt-overlap rule's markup lookup table agrees with torch.isin, ids outside the table included."""

from __future__ import annotations

import torch

from rl_guards.tensors.grpo_masks import _markup_table


def test_table_lookup_is_isin() -> None:
    markup = [5, 9, 9, 130, 2]
    table = _markup_table(markup, torch.device("cpu"))
    assert _markup_table(list(markup), torch.device("cpu")) is table  # cached for the same ids
    ids = torch.arange(-3, 200).view(7, -1)
    top = table.size(0)
    looked_up = table[ids.clamp(0, top - 1)] & (ids < top) & (ids >= 0)
    assert torch.equal(looked_up, torch.isin(ids, torch.tensor(markup)))
    other = [7]  # another list: its own table
    assert _markup_table(other, torch.device("cpu"))[7] and not _markup_table(other, torch.device("cpu"))[5]
