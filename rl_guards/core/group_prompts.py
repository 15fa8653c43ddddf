"""Group integrity: every rollout of a group answered the same prompt.

Group-relative advantages (GRPO, the cookbook's ``compute_advantages``) compare a rollout's reward with the mean of
its group. That only means something when the group's rollouts answered one prompt: a group that holds different
problems (a dataset whose "groups" are batches of unrelated questions, an env builder that draws a new problem per
env) turns the advantage into "easier question than the neighbours", and the model learns nothing about answers.

A row's prompt is reduced to :func:`prompt_key` (a 52-bit digest, exact as a float64, so it travels with the
batch's other per-row numbers); :func:`mixed_groups` lists the groups whose rows do not share one key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

KEY_BITS = 52  # a float64 holds integers up to 2**53 exactly


def prompt_key(ids: Sequence[int]) -> float:
    """A digest of a prompt's token ids, as an exactly representable float (0.0 for an empty prompt)."""
    if not len(ids):
        return 0.0
    digest = hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=8).digest()
    return float((int.from_bytes(digest, "little") & ((1 << KEY_BITS) - 1)) | 1)


def mixed_groups(keys: Sequence[float], group_size: int) -> list[list[int]]:
    """Per group whose rows' keys differ: the group's rows (first row of each distinct prompt first).

    Rows with key 0 (prompt unknown) are left out of the comparison.
    """
    values = np.asarray(keys, dtype=np.float64)
    out: list[list[int]] = []
    if group_size < 2:
        return out
    for start in range(0, len(values) - group_size + 1, group_size):
        group = values[start : start + group_size]
        known = group[group != 0]
        if len(np.unique(known)) > 1:
            rows = list(range(start, start + group_size))
            firsts = [rows[int(np.flatnonzero(group == v)[0])] for v in dict.fromkeys(known.tolist())]
            out.append(firsts + [r for r in rows if r not in firsts])
    return out


__all__ = ["KEY_BITS", "mixed_groups", "prompt_key"]
