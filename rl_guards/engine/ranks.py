"""The ranks of a run as the engine sees them: who this process is, and the few collectives it runs.

Without ``torch.distributed`` (one process, a test, an offline replay) every collective returns this process's own
part and torch is not imported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rl_guards.tensors.lockstep import Section


@dataclass
class Ranks:
    """This process in the run; ``device`` gives the device collectives run on (the trainer's, or None: CPU);
    ``group``: the process group they run on (None: the default one; the engine's own CPU group when it has one)."""

    world_size: int = 1
    process_index: int = 0
    is_main_process: bool = True
    device: Callable[[], Any] = lambda: None
    group: Any = None

    @property
    def several(self) -> bool:
        """True when there are other ranks to talk to (a process group with more than one rank)."""
        if self.world_size <= 1:
            return False
        from rl_guards.tensors import collectives

        return collectives.distributed()

    def all_reduce_ints(self, values: Sequence[int], op: str = "max") -> list[int]:
        if not self.several:
            return [int(v) for v in values]
        from rl_guards.tensors import collectives

        return collectives.all_reduce_ints(values, op=op, device=self.device(), group=self.group)

    def all_gather_objects(self, obj: Any) -> list[Any]:
        if not self.several:
            return [obj]
        from rl_guards.tensors import collectives

        return collectives.all_gather_objects(obj, group=self.group)

    def gather_objects_to_main(self, obj: Any) -> list[Any] | None:
        if not self.several:
            return [obj]
        from rl_guards.tensors import collectives

        return collectives.gather_objects_to_main(obj, group=self.group)

    def gather_rows(self, host: Any, device_columns: Sequence[Any], device: Any = None) -> Any:
        """``[rows, k]`` numbers of every rank (rank order) on the host; see ``gather_feature_rows``."""
        if not device_columns and not self.several:
            return host
        from rl_guards.tensors import collectives

        device = device if device is not None else self.device()
        return collectives.gather_feature_rows(host, device_columns, device, group=self.group)

    def section(self, name: str, passthrough: tuple[type[BaseException], ...] = ()) -> Section:
        """A lockstep section on this process's group (see :mod:`rl_guards.tensors.lockstep`): its collectives are
        agreed on first, and an exception inside on any rank leaves it on every rank, as ``section.failure``."""
        from rl_guards.tensors.lockstep import Section

        device = self.device() if self.group is None and self.several else None
        return Section(name, self.group, device, passthrough)

    def own_group(self) -> None:
        """Run this process's collectives on a group of rl_guards' own (collective: every rank calls it at once)."""
        if self.several and self.group is None:
            from rl_guards.tensors import collectives

            self.group = collectives.own_group()

    def thread_setup(self) -> Callable[[], None]:
        """What a background thread calls first to work as this thread does (its device, no autograd)."""
        if not self.several:
            return lambda: None
        from rl_guards.tensors import collectives

        return collectives.thread_setup()

    def all_gather_float_rows(self, rows: list[list[float]]) -> list[list[float]]:
        """Every rank's numeric rows (rank order); this rank's alone without a process group."""
        if not self.several:
            return rows
        import numpy as np

        width = len(rows[0]) if rows else 0
        local = np.asarray(rows, dtype=np.float64).reshape(len(rows), width)
        return self.gather_rows(local, []).tolist()


__all__ = ["Ranks"]
