"""What crosses from the reward workers to the trainer process: one small record per row, and what the trainer-side
hook makes of it for the engine (the row's ``compute_score`` call).

The reward manager scores one row at a time in a Ray actor; its per-row findings travel back with verl's own
result, as one more ``reward_extra_info`` key, ``"rl_guards"``, holding a :class:`ScoreRecord` as a JSON string:

- the same key on every row (verl takes the key list from the first row and indexes every row with it);
- a string, so that verl's validation metrics (numeric extra keys only) and its DAPO group filter skip it;
- no text: the response's ids and the dataset's columns already reach the trainer; the string the scorer saw is
  checked there by hash and length against the hook's own decode.

Sizes: ~250 bytes a row (more when ``extra_info`` is kept: at most :data:`MAX_EXTRA_INFO_CHARS`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from rl_guards.reward_calls.base import CallRow

RECORD_KEY = "rl_guards"  # the reward_extra_info key
PENALTY_TERM = "stray_think_penalty"  # the stray-think penalty: its score term, extra key and reward column
SCHEMA = 1
MAX_EXTRA_INFO_CHARS = 2000  # extra_info as the scorer received it is kept up to this size (JSON), else None


def text_digest(text: str) -> str:
    """A short digest of a string (what the scorer saw vs what the hook decodes)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


@dataclass
class ScoreRecord:
    """One row's score as the reward manager saw it happen."""

    scorer: str = ""  # the scoring function's name (the reward column's name)
    valid_len: int = 0  # response tokens verl decoded for the scorer (attention mask over the response)
    chars: int = -1  # length of the solution_str the scorer received (-1: the call was not observed)
    digest: str = ""  # text_digest of that solution_str
    score: float | None = None  # the scorer's own score (None: it returned None, raised, or had no route)
    given: float | None = None  # the score verl's manager received from the scorer (a substitute, see below)
    error: str = ""  # the scorer (or the inner manager) raised: "Type: message (at file:line)"
    unrouted: bool = False  # verl's default_compute_score has no scorer for this data_source
    returned_none: bool = False  # the scorer returned None (or a dict whose score is None)
    penalty: float | None = None  # the stray-think penalty added to verl's reward (None: off)
    total: float | None = None  # the reward_score verl got back from this manager
    seconds: float = 0.0  # time in the scorer
    extra_info: Any = None  # extra_info as the scorer received it (in JSON: when JSON-able and small)
    schema: int = SCHEMA
    extras: dict[str, Any] = field(default_factory=dict)  # room for later fields, read by nobody yet

    def to_json(self) -> str:
        """The record as compact JSON; ``extra_info`` left out (None) when it is larger than
        :data:`MAX_EXTRA_INFO_CHARS` or not JSON-able."""
        data = dict(self.__dict__)
        if data["extra_info"] is not None:
            try:
                text = json.dumps(data["extra_info"], separators=(",", ":"), default=str)
            except (TypeError, ValueError):
                text = ""
            data["extra_info"] = json.loads(text) if 0 < len(text) <= MAX_EXTRA_INFO_CHARS else None
        return json.dumps(data, separators=(",", ":"), default=str)

    @classmethod
    def from_json(cls, text: Any) -> ScoreRecord | None:
        """The record of one row, or None when the row has none (another manager) or it cannot be read."""
        if not isinstance(text, str | bytes):
            return None
        try:
            data = json.loads(text)
        except (TypeError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            return None
        known = {f for f in cls.__dataclass_fields__}
        try:
            return cls(**{k: v for k, v in data.items() if k in known})
        except TypeError:
            return None


@dataclass
class VerlScoreCall:
    """One row's ``compute_score`` call, as verl's reward manager made it, for code that scores variants of the row
    the way verl does (the reward probes): ``compute_score(data_source=, solution_str=, ground_truth=,
    extra_info=)`` (verl's naive/dapo managers; a sync scorer runs in a thread, an async one is awaited).

    On :attr:`rl_guards.engine.assembly.LocalRows.reward_inputs` (and so ``RolloutBatch.reward_inputs``) the verl
    driver puts a tuple of these, one per held row, in held-row order; the reward probes read each as
    :meth:`call_row` and call the scorer with :class:`rl_guards.reward_calls.verl.VerlCaller`.
    """

    data_source: Any  # non_tensor_batch["data_source"]
    solution_str: str  # tokenizer.decode(response ids, skip_special_tokens=True), as verl decodes
    ground_truth: Any  # non_tensor_batch["reward_model"]["ground_truth"]
    extra_info: Any  # as the scorer received it (the manager adds num_turns etc.) when recorded, else the dataset's
    response_ids: list[int]  # the valid response ids before decoding (EOS kept; what the rollout generated)
    prompt_ids: list[int]  # the prompt ids, unpadded
    score: float | None = None  # what the scorer returned for this row (None: None, raised, or no route)
    error: str = ""  # the scorer raised: the exception and where
    observed: bool = False  # solution_str equals (length and digest) the string the scorer received
    extra_info_recorded: bool = False  # extra_info is the scorer's own (else the dataset's)
    seconds: float | None = None  # time in the scorer (None: the call was not observed)
    prompt: Any = None  # the dataset's raw_prompt (chat messages), when the row carries it

    def call_row(self) -> CallRow:
        """The row as :class:`~rl_guards.reward_calls.verl.VerlCaller` calls a ``compute_score`` on it:
        ``data_source``, ``extra_info`` (as the scorer received it when recorded) and ``ground_truth`` as columns,
        the ground truth as the reference, the solution_str as the row's completion. The prompt is for the probes'
        own variants (an echoed prompt): verl never hands it to the scorer."""
        return CallRow(
            prompt=_messages(self.prompt),
            columns={"data_source": self.data_source, "extra_info": self.extra_info, "ground_truth": self.ground_truth},
            reference=self.ground_truth,
            prompt_ids=self.prompt_ids,
            original=self.solution_str,
            handle=self,
        )


def _messages(prompt: Any) -> Any:
    """A raw prompt as plain Python (verl's dataset columns come back as numpy object arrays); "" when absent."""
    if prompt is None:
        return ""
    if hasattr(prompt, "tolist") and not isinstance(prompt, str):
        prompt = prompt.tolist()
    if isinstance(prompt, list | tuple):
        return [dict(m) if isinstance(m, dict) else m for m in prompt]
    return prompt


__all__ = ["MAX_EXTRA_INFO_CHARS", "RECORD_KEY", "SCHEMA", "ScoreRecord", "VerlScoreCall", "text_digest"]
