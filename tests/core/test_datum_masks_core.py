"""Loss placement in datums and group integrity, on plain lists (no framework)."""

from __future__ import annotations

import pytest

from rl_guards.core import datum_masks as D
from rl_guards.core.group_prompts import mixed_groups, prompt_key


def _datum(seq: list[int], loss: list[float], name: str = "advantages") -> D.DatumView:
    return D.DatumView(seq[:-1], seq[1:], {name: loss})


def test_a_single_turn_rollout_is_one_sequence_with_its_action_sampled() -> None:
    (seq,) = D.sampled_sequences([([1, 2, 3], [7, 8])])
    assert seq.tokens == (1, 2, 3, 7, 8)
    assert seq.sampled == (False, False, True, True)  # targets 2, 3, 7, 8: only 7 and 8 were sampled


def test_turns_extend_the_sequence_while_the_observation_extends_it_and_start_a_new_one_otherwise() -> None:
    turns = [([1, 2], [3]), ([1, 2, 3, 4], [5]), ([9], [6, 6])]
    first, second = D.sampled_sequences(turns)
    assert first.tokens == (1, 2, 3, 4, 5) and first.sampled == (False, True, False, True)  # targets 2, 3, 4, 5
    assert second.tokens == (9, 6, 6) and second.sampled == (True, True)


CASES = [
    # (name, datum, expected kinds)
    ("healthy", _datum([1, 2, 3, 7, 8], [0, 0, 0.5, 0.5]), []),
    ("zero advantage everywhere", _datum([1, 2, 3, 7, 8], [0, 0, 0, 0]), []),
    ("loss on the prompt", _datum([1, 2, 3, 7, 8], [0, 0.5, 0.5, 0.5]), [D.OBSERVATION_LOSS]),
    ("mask on the prompt", _datum([1, 2, 3, 7, 8], [0, 1, 1, 1], "mask"), [D.OBSERVATION_LOSS]),
    ("weight of two", _datum([1, 2, 3, 7, 8], [0, 0, 2, 1], "weights"), [D.MASK_VALUES]),
    ("targets not shifted", D.DatumView([1, 2, 3, 7], [1, 2, 3, 7], {"advantages": [0, 0, 1, 1]}), [D.TARGET_SHIFT]),
]


@pytest.mark.parametrize(("name", "datum", "kinds"), CASES, ids=[c[0] for c in CASES])
def test_check_datum(name: str, datum: D.DatumView, kinds: list[str]) -> None:
    (expected,) = D.sampled_sequences([([1, 2, 3], [7, 8])])
    bits, bad = D.check_datum(datum, expected)
    assert D.kinds_of(bits) == kinds
    assert bool(bad) == bool(kinds)


def test_a_datum_no_rollout_sampled_is_unmatched_and_the_lookup_finds_rows_by_sequence() -> None:
    rows = {0: D.sampled_sequences([([1, 2], [3])]), 1: D.sampled_sequences([([1, 2], [4])])}
    lookup = D.expected_by_key(rows)
    assert lookup[(1, 2, 4)][0] == 1
    bits, _ = D.check_datum(_datum([5, 6, 7], [0, 1]), None)
    assert D.kinds_of(bits) == [D.UNMATCHED_DATUM]


def test_groups_of_different_prompts_are_named_with_their_rows() -> None:
    a, b = prompt_key([1, 2, 3]), prompt_key([1, 2, 4])
    assert a != b and a == prompt_key([1, 2, 3]) and float(int(a)) == a
    assert mixed_groups([a, a, a, a, a, b, a, b], 4) == [[4, 5, 6, 7]]
    assert mixed_groups([a, a, 0.0, a], 4) == []  # an unknown prompt (0) is not compared
    assert mixed_groups([a, b], 1) == []
