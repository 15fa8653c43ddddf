"""Loss placement in training datums (Tinker's ``Datum``), checked on plain lists.

A datum is one token sequence the trainer is given: ``input_tokens`` (the sequence without its last token), one
``target`` per input position (the sequence shifted by one) and per-target loss inputs. In the tinker-cookbook's RL
datums the loss of a target is carried by its ``advantage`` (importance sampling, PPO, CISPO) and marked by
``mask`` (stripped before sending); a supervised datum carries ``weights``. A target *carries loss* when any of those
is non-zero there.

The reference is the rollout as the sampler produced it: the observation tokens each turn was given and the action
tokens the sampler returned. :func:`sampled_sequences` lays a rollout's turns out the way the cookbook builds datums
(a turn whose observation extends the sequence so far continues it, any other starts a new one) and marks, per
target, whether it is a sampled token. :func:`check_datum` then names what is wrong:

=====================  ====================================================================================
kind                   meaning
=====================  ====================================================================================
``observation_loss``   a target that is an observation token (prompt, tool result, a prefill) carries loss
``target_shift``       the targets are not the input tokens shifted by one (the loss trains the wrong tokens)
``mask_values``        a ``mask`` or ``weights`` value other than 0 and 1
``unmatched_datum``    a datum whose token sequence no rollout of the batch produced (cannot be checked)
=====================  ====================================================================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

OBSERVATION_LOSS = "observation_loss"
TARGET_SHIFT = "target_shift"
MASK_VALUES = "mask_values"
UNMATCHED_DATUM = "unmatched_datum"

# Reporting order (what corrupts gradients first); the bit of a kind is its index here.
DATUM_KINDS: tuple[str, ...] = (OBSERVATION_LOSS, TARGET_SHIFT, MASK_VALUES, UNMATCHED_DATUM)
SUSPECTED_DATUM_KINDS = frozenset({UNMATCHED_DATUM})  # evidence for a warning, never a stop
LOSS_INPUTS: tuple[str, ...] = ("advantages", "weights", "mask")  # per-target inputs whose non-zero means loss
BINARY_INPUTS: tuple[str, ...] = ("mask", "weights")


@dataclass(frozen=True)
class ExpectedSequence:
    """One token sequence of a rollout, as sampled: ``sampled[i]`` is True when ``tokens[i + 1]`` (target ``i``) is
    a token the sampler produced."""

    tokens: tuple[int, ...]
    sampled: tuple[bool, ...]

    @property
    def key(self) -> tuple[int, ...]:
        return self.tokens


@dataclass
class DatumView:
    """A datum as plain lists: its input tokens, targets, and per-target loss inputs (``advantages``, ...)."""

    input_tokens: list[int]
    targets: list[int]
    loss_inputs: dict[str, list[float]] = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, ...]:
        """The whole sequence (input plus the last target): what a rollout's :class:`ExpectedSequence` holds."""
        return (*self.input_tokens, *self.targets[-1:])

    def carries_loss(self) -> list[bool]:
        """Per target: some loss input is non-zero there."""
        n = len(self.targets)
        out = [False] * n
        for name in LOSS_INPUTS:
            values = self.loss_inputs.get(name)
            if values is None:
                continue
            for i, v in enumerate(values[:n]):
                if v != 0:
                    out[i] = True
        return out


@dataclass
class LossRow:
    """What one rollout (a batch row) trains on: its sequences as sampled and, when the driver built them before
    training, its datums (None: the datums are checked when the trainer is given them)."""

    expected: list[ExpectedSequence]
    datums: list[DatumView] | None = None
    source: str = ""  # where the datums come from, for messages ("rebuilt with the cookbook's trajectory_to_data")


def sampled_sequences(turns: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[ExpectedSequence]:
    """A rollout's ``(observation tokens, action tokens)`` turns as the sequences a trainer is given.

    An observation that starts with the whole sequence so far extends it (only its new tokens are added); any other
    observation starts a new sequence. Action tokens are marked sampled, observation tokens not.
    """
    out: list[ExpectedSequence] = []
    tokens: list[int] = []
    sampled: list[bool] = []

    def close() -> None:
        if tokens:
            out.append(ExpectedSequence(tuple(tokens), tuple(sampled[1:])))

    for ob, ac in turns:
        ob = list(ob)
        if tokens and len(ob) >= len(tokens) and ob[: len(tokens)] == tokens:
            new = ob[len(tokens) :]
        else:
            close()
            tokens, sampled = [], []
            new = ob
        tokens += new
        sampled += [False] * len(new)
        tokens += list(ac)
        sampled += [True] * len(ac)
    close()
    return out


def check_datum(datum: DatumView, expected: ExpectedSequence | None) -> tuple[int, list[int]]:
    """``(kind bits, offending target positions)`` of one datum against the sequence its rollout sampled (None: no
    rollout of the batch produced this sequence)."""
    bits = 0
    bad: list[int] = []
    n = len(datum.targets)
    if datum.input_tokens[1:] != datum.targets[:-1] or len(datum.input_tokens) != n:
        bits |= 1 << DATUM_KINDS.index(TARGET_SHIFT)
        bad += [i for i in range(min(n, len(datum.input_tokens)) - 1) if datum.input_tokens[i + 1] != datum.targets[i]]
    for name in BINARY_INPUTS:
        values = datum.loss_inputs.get(name)
        if values is not None and any(v not in (0, 1) for v in values):
            bits |= 1 << DATUM_KINDS.index(MASK_VALUES)
            bad += [i for i, v in enumerate(values) if v not in (0, 1)]
    if expected is None:
        bits |= 1 << DATUM_KINDS.index(UNMATCHED_DATUM)
        return bits, sorted(set(bad))
    loss = datum.carries_loss()
    observation = [i for i, (on, s) in enumerate(zip(loss, expected.sampled, strict=False)) if on and not s]
    if observation:
        bits |= 1 << DATUM_KINDS.index(OBSERVATION_LOSS)
        bad += observation
    return bits, sorted(set(bad))


def expected_by_key(
    rows: Mapping[int, Sequence[ExpectedSequence]],
) -> dict[tuple[int, ...], tuple[int, ExpectedSequence]]:
    """Each sampled sequence of the rows -> (its first row, the sequence)."""
    out: dict[tuple[int, ...], tuple[int, ExpectedSequence]] = {}
    for row, sequences in rows.items():
        for seq in sequences:
            out.setdefault(seq.key, (row, seq))
    return out


def kinds_of(bits: int) -> list[str]:
    """The kinds a bit mask holds, in reporting order."""
    return [kind for k, kind in enumerate(DATUM_KINDS) if bits >> k & 1]


__all__ = [
    "BINARY_INPUTS",
    "DATUM_KINDS",
    "LOSS_INPUTS",
    "MASK_VALUES",
    "OBSERVATION_LOSS",
    "SUSPECTED_DATUM_KINDS",
    "TARGET_SHIFT",
    "UNMATCHED_DATUM",
    "DatumView",
    "ExpectedSequence",
    "LossRow",
    "check_datum",
    "expected_by_key",
    "kinds_of",
    "sampled_sequences",
]
