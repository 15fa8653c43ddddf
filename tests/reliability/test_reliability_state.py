"""Issue 22, items 2-4: the guards' saved state on real GRPOTrainer runs of the tiny fixture.

- a checkpoint written without rl_guards resumes with it, and the next checkpoint is complete (it was half-written:
  ``KeyError: 'GuardRun'`` in the trainer's save);
- a damaged or other-version rl_guards section in ``trainer_state.json`` is said once, started fresh, never fatal;
- a guard whose state cannot be saved is skipped with a warning; the checkpoint is still complete, valid JSON;
- ``restore_callback_states_from_checkpoint=True`` resumes (it was ``TypeError``: HF rebuilds stateful callbacks as
  ``type(cb)(**saved_args)``) and the live run gets the saved state.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

import rl_guards
from rl_guards.console import capture
from rl_guards.core.batch import RolloutBatch
from rl_guards.guards.base import Guard, Reporter
from rl_guards.trl.state import GuardRunState

pytestmark = pytest.mark.slow

CONFIG = {"rollouts": {"wandb_rows_per_task": 0}}
SAVE = {"save_strategy": "steps", "save_steps": 2}


def _section(state: dict[str, Any]) -> tuple[str, Any]:
    """The rl_guards entry of a trainer_state.json's stateful_callbacks: (key, saved)."""
    found = [(k, v) for k, v in state["stateful_callbacks"].items() if k in ("GuardRunState", "GuardRun")]
    assert len(found) == 1, list(state["stateful_callbacks"])
    return found[0]


def _attributes(checkpoint: Path) -> dict[str, Any]:
    """The rl_guards section's attributes; checks the file is valid JSON and the section well formed."""
    text = (checkpoint / "trainer_state.json").read_text()
    saved = _section(json.loads(text))[1]
    assert isinstance(saved, dict) and saved["args"] == {}, saved
    return saved["attributes"]


def _state_warnings(caught: Any) -> list[str]:
    """rl_guards' warnings about state it could not save or restore."""
    said = caught.messages
    return [m for m in said if "could not be saved" in m or "could not be restored" in m]


@pytest.fixture(scope="module")
def guarded_checkpoint(tiny: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """checkpoint-2 of a guarded run (every guard), shared by the tests that damage a copy of it."""
    from trl import GRPOTrainer

    from rl_guards.testing import make_dataset, tiny_grpo_config
    from rl_guards.testing.rewards import arith_correct, echo_match

    out = tmp_path_factory.mktemp("guarded") / "run"
    trainer = GRPOTrainer(
        model=tiny.model_dir,
        processing_class=tiny.load_tokenizer(),
        reward_funcs=[arith_correct, echo_match],
        args=tiny_grpo_config(out, max_steps=2, **SAVE),
        train_dataset=make_dataset(),
    )
    rl_guards.install(trainer, CONFIG)
    trainer.train()
    assert _attributes(out / "checkpoint-2")["batches_seen"] == 2
    return out / "checkpoint-2"


def _resume(make: Callable[..., Any], out: Path, checkpoint: Path, max_steps: int = 4, **overrides: Any) -> Any:
    trainer = make(output_dir=out, max_steps=max_steps, **{**SAVE, **overrides})
    run = rl_guards.install(trainer, CONFIG)
    trainer.train(resume_from_checkpoint=str(checkpoint))
    return run


# ----- item 2: a checkpoint written without rl_guards ------------------------------------------------------------
def test_a_checkpoint_written_without_rl_guards_resumes_with_it(make_grpo_trainer: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    plain = make_grpo_trainer(output_dir=out, max_steps=2, **SAVE)
    plain.train()
    assert not [k for k in json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["stateful_callbacks"]
                if k.startswith("GuardRun")]  # fmt: skip

    with capture() as caught:
        run = _resume(make_grpo_trainer, out, out / "checkpoint-2")  # 437f4ff: KeyError: 'GuardRun' at step 4
    assert run.batches_seen == 2
    assert _attributes(out / "checkpoint-4")["batches_seen"] == 2  # the next checkpoint is complete
    assert not _state_warnings(caught)  # nothing was damaged: no section is not a damaged section
    # ... and the latest checkpoint resumes.
    again = _resume(make_grpo_trainer, out, out / "checkpoint-4", max_steps=5)
    assert again.batches_seen == 3


def test_guards_installed_by_their_callback_file_their_section(make_grpo_trainer: Any, tmp_path: Path) -> None:
    from rl_guards.trl.callback import GuardsCallback

    # GuardsCallback installs the guards at train begin, after the trainer built its state: the same missing name.
    out = tmp_path / "run"
    trainer = make_grpo_trainer(output_dir=out, max_steps=2, callbacks=[GuardsCallback(CONFIG)], **SAVE)
    trainer.train()
    assert _attributes(out / "checkpoint-2")["batches_seen"] == 2


# ----- item 3: damaged or other-version sections at resume -------------------------------------------------------
def _extra_field(saved: dict[str, Any]) -> None:  # a finding saved by a newer version, with a field this one lacks
    finding = {"guard": "x", "kind": "y", "severity": "warning", "message": "m", "step": 1, "added_later": True}
    saved["attributes"]["session"]["findings"].append(finding)


def _missing_field(saved: dict[str, Any]) -> None:  # a count row without its count
    saved["attributes"]["session"]["counts"].append(["x", "y"])


def _wrong_type(saved: dict[str, Any]) -> None:
    saved["attributes"]["batches_seen"] = "two"


def _guard_wrong_type(saved: dict[str, Any]) -> None:
    saved["attributes"]["guards"]["masking"] = {"calls": "many", "checked": None}


def _guard_not_a_dict(saved: dict[str, Any]) -> None:
    saved["attributes"]["guards"]["masking"] = [1, 2]


def _attributes_not_a_dict(saved: dict[str, Any]) -> None:
    saved["attributes"] = ["guards"]


def _section_not_a_dict(saved: dict[str, Any]) -> Any:
    return "garbage"


def _future_version(saved: dict[str, Any]) -> None:  # a later layout this version cannot read
    saved["attributes"]["version"] = 99


# damage -> (what is started fresh: "all" or a part's name, a word the warning names it by)
DAMAGES: dict[str, tuple[Callable[[dict[str, Any]], Any], str, str]] = {
    "extra_field": (_extra_field, "session", "session"),
    "missing_field": (_missing_field, "session", "session"),
    "wrong_type": (_wrong_type, "batches_seen", "batches_seen"),
    "guard_wrong_type": (_guard_wrong_type, "masking", "masking"),
    "guard_not_a_dict": (_guard_not_a_dict, "masking", "masking"),
    "attributes_not_a_dict": (_attributes_not_a_dict, "all", "not a"),
    "section_not_a_dict": (_section_not_a_dict, "all", "not a"),
    "future_version": (_future_version, "all", "version 99"),
}


def damage_checkpoint(checkpoint: Path, damage: Callable[[dict[str, Any]], Any]) -> None:
    """Apply ``damage`` to the rl_guards section of ``checkpoint``'s trainer_state.json, in place."""
    path = checkpoint / "trainer_state.json"
    state = json.loads(path.read_text())
    key, saved = _section(state)
    replaced = damage(saved)
    state["stateful_callbacks"][key] = saved if replaced is None else replaced
    path.write_text(json.dumps(state))


# With restore_callback_states_from_checkpoint=True, HF reads the section itself first (args, attributes).
RESTORE_CASES = ("attributes_not_a_dict", "extra_field", "future_version", "section_not_a_dict")


@pytest.mark.parametrize(
    ("name", "restore"), [(n, False) for n in sorted(DAMAGES)] + [(n, True) for n in RESTORE_CASES]
)
def test_a_damaged_section_is_said_once_and_started_fresh(
    name: str, restore: bool, guarded_checkpoint: Path, make_grpo_trainer: Any, tmp_path: Path
) -> None:
    damage, fresh, named = DAMAGES[name]
    out = tmp_path / "run"
    shutil.copytree(guarded_checkpoint, out / "checkpoint-2")
    damage_checkpoint(out / "checkpoint-2", damage)

    with capture() as caught:
        # 437f4ff: most raise here, at resume
        run = _resume(make_grpo_trainer, out, out / "checkpoint-2", restore_callback_states_from_checkpoint=restore)
    said = _state_warnings(caught)
    assert len(said) == 1, said
    assert named in said[0] and "fresh" in said[0], said[0]
    # What was dropped starts fresh (2 batches after the resume); the rest is restored (2 + 2).
    assert run.batches_seen == (2 if fresh in ("all", "batches_seen") else 4)
    assert run.guard("masking").checked == (2 if fresh in ("all", "masking") else 4)
    # The next checkpoint holds a well-formed section of this version.
    attributes = _attributes(out / "checkpoint-4")
    assert attributes["version"] == 1 and attributes["batches_seen"] == run.batches_seen
    assert attributes["guards"]["masking"]["checked"] == run.guard("masking").checked


def test_a_second_damaged_resume_is_said_again(
    guarded_checkpoint: Path, make_grpo_trainer: Any, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    shutil.copytree(guarded_checkpoint, out / "checkpoint-2")
    damage_checkpoint(out / "checkpoint-2", _wrong_type)
    _resume(make_grpo_trainer, out, out / "checkpoint-2")  # checkpoint-4's session: that warning was shown
    damage_checkpoint(out / "checkpoint-4", _wrong_type)
    with capture() as caught:
        run = _resume(make_grpo_trainer, out, out / "checkpoint-4", max_steps=5)
    assert len(_state_warnings(caught)) == 1  # about this resume, not a repeat of the last one's
    assert run.session.counts[("state", "state_not_restored")] == 2


# ----- item 3: a guard whose state cannot be saved ---------------------------------------------------------------
class CountingGuard(Guard):
    """Counts batches; its state is saved and restored."""

    name: ClassVar[str] = "counting"
    config_field: ClassVar[str] = "tasks"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.batches = 0

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        self.batches += 1

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches = int(state["batches"])


class UnsaveableGuard(Guard):
    """A guard with a bug in state_dict(), as a lone-surrogate task name made encode_task() raise."""

    name: ClassVar[str] = "unsaveable"
    config_field: ClassVar[str] = "tasks"

    def state_dict(self) -> dict[str, Any]:
        return {"task": "bad\udc80name".encode().decode()}


class NotJsonGuard(Guard):
    """A guard whose state is not JSON: trainer_state.json's writer would raise after half the checkpoint."""

    name: ClassVar[str] = "not_json"
    config_field: ClassVar[str] = "truncation"

    def state_dict(self) -> dict[str, Any]:
        return {"seen": {1, 2}, 3: "int and str keys do not sort"}


def test_a_guard_whose_state_cannot_be_saved_is_skipped(make_grpo_trainer: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    trainer = make_grpo_trainer(output_dir=out, max_steps=2, save_strategy="steps", save_steps=1)
    run = rl_guards.install(trainer, CONFIG, guards=[CountingGuard, UnsaveableGuard, NotJsonGuard])
    with capture() as caught:
        trainer.train()  # 437f4ff: UnicodeEncodeError at the first checkpoint
    said = _state_warnings(caught)
    assert len(said) == 2 and "unsaveable" in said[0] and "not_json" in said[1], said  # once each, not per checkpoint
    for step in (1, 2):
        attributes = _attributes(out / f"checkpoint-{step}")
        assert attributes["guards"] == {"counting": {"batches": step}}
    assert ("unsaveable", "state_not_saved") in run.session.counts

    resumed = make_grpo_trainer(output_dir=out, max_steps=3)
    run2 = rl_guards.install(resumed, CONFIG, guards=[CountingGuard, UnsaveableGuard, NotJsonGuard])
    resumed.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert run2.guard("counting").batches == 3


# ----- item 4: restore_callback_states_from_checkpoint=True ------------------------------------------------------
def test_restore_callback_states_from_checkpoint_resumes_into_the_live_run(
    guarded_checkpoint: Path, make_grpo_trainer: Any, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    shutil.copytree(guarded_checkpoint, out / "checkpoint-2")
    trainer = make_grpo_trainer(output_dir=out, max_steps=4, restore_callback_states_from_checkpoint=True, **SAVE)
    run = rl_guards.install(trainer, CONFIG)
    installed = run.saved_state
    trainer.train(resume_from_checkpoint=str(out / "checkpoint-2"))  # 437f4ff: TypeError: GuardRun() missing args
    assert run.batches_seen == 4 and run.guard("masking").checked == 4  # restored into the run install() returned
    assert run in trainer.callback_handler.callbacks  # still the one that gets the trainer's events
    holders = [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, GuardRunState)]
    assert len(holders) == 1 and holders[0] is not installed  # HF did rebuild the section's object ...
    assert holders[0].run is run  # ... and the run bound it: it saves the run's state
    attributes = _attributes(out / "checkpoint-4")
    assert attributes["batches_seen"] == 4 and attributes["guards"]["masking"]["checked"] == 4
