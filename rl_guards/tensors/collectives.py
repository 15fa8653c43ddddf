"""The few collectives rl_guards runs across ranks: small fixed-size integer vectors, summed or maxed.

Every rank must call them at the same points, with vectors of the same length: callers never put one inside a
branch that only some ranks take. Without ``torch.distributed`` (or with one process) they return the input.
``group``: run on that process group (rl_guards' own CPU group, :func:`own_group`) instead of the default one.

Inside a :class:`~rl_guards.tensors.lockstep.Section` each is gated first (:func:`~rl_guards.tensors.lockstep.gate`):
every rank agrees that no rank failed and that all are at this same collective (kind and width) before it starts.
"""

from __future__ import annotations

import atexit
from collections.abc import Sequence
from typing import Any

import torch

from rl_guards.tensors.lockstep import gate


def distributed() -> bool:
    """True when ``torch.distributed`` is initialised with more than one rank."""
    dist = torch.distributed
    return bool(dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


def own_group() -> Any:
    """A gloo group over every rank, for rl_guards alone (collective: every rank calls it once, at the same point).

    Collectives on it never interleave with the trainer's own (gradients, TRL's gathers) on the default group, so a
    background thread can run them while the step trains; its tensors live on the CPU. It waits as long as the
    default group does (the run's ``ddp_timeout``), so a rank that never arrives fails the run in the same time.
    """
    dist = torch.distributed
    gate("new_group")
    timeout = None
    try:  # the default group's timeout (private attribute; the library default when it moves)
        default = dist.distributed_c10d._get_default_group()
        kind = "cuda" if dist.get_backend() == "nccl" else "cpu"
        timeout = default._get_backend(torch.device(kind)).options._timeout
    except Exception:
        timeout = None
    group = dist.new_group(backend="gloo", timeout=timeout)
    atexit.register(_release, group)
    return group


def _release(group: Any) -> None:
    """Destroy rl_guards' group at exit while the interpreter is whole: a gloo group left to the interpreter's
    teardown can abort the process after the run has finished ("terminate called without an active exception",
    pytorch/pytorch#179291). A no-op when the run already destroyed its groups."""
    dist = torch.distributed
    try:
        if dist.is_initialized():
            dist.destroy_process_group(group)
    except Exception:  # already destroyed, or the default group is gone: nothing left to release
        pass


def thread_setup() -> Any:
    """What another thread calls first to work as this one would: this thread's CUDA device, and autograd off (the
    guards only read tensors)."""
    index = torch.cuda.current_device() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    def setup() -> None:
        torch.set_grad_enabled(False)
        if index is not None:
            torch.cuda.set_device(index)

    return setup


def _device(device: Any = None, group: Any = None) -> torch.device:
    if group is not None:  # rl_guards' own group is gloo: CPU tensors
        return torch.device("cpu")
    if device is not None:
        return torch.device(device)
    if torch.distributed.get_backend() == "nccl":  # NCCL reduces CUDA tensors only
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_ints(values: Sequence[int], op: str = "sum", device: Any = None, group: Any = None) -> list[int]:
    """Element-wise ``sum`` or ``max`` of an integer vector over every rank (one collective)."""
    if not distributed():
        return [int(v) for v in values]
    gate(f"all_reduce_ints/{len(values)}")
    dist = torch.distributed
    tensor = torch.tensor([int(v) for v in values], dtype=torch.long, device=_device(device, group))
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM, group=group)
    return [int(v) for v in tensor.tolist()]


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """A tensor summed over every rank (a copy); the tensor itself without a process group."""
    if not distributed():
        return t
    gate(f"all_reduce_sum/{t.numel()}")
    t = t.clone()
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
    return t


def all_gather_rows(local: torch.Tensor, group: Any = None) -> torch.Tensor:
    """``[rows, k]`` on each rank -> ``[ranks * rows, k]`` (rank order) on every rank, on the tensor's device.

    Every rank must pass the same shape (TRL gives every rank the same number of rows per batch).
    """
    if not distributed():
        return local
    gate(f"all_gather_rows/{tuple(local.shape[1:])}")
    dist = torch.distributed
    device = _device(local.device if local.device.type != "cpu" else None, group)
    local = local.to(device).contiguous()
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local, group=group)
    return torch.cat(parts, dim=0)


def all_gather_objects(obj: Any, group: Any = None) -> list[Any]:
    """One picklable object per rank, on every rank (rank order)."""
    if not distributed():
        return [obj]
    gate("all_gather_objects")
    out: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(out, obj, group=group)
    return out


def gather_objects_to_main(obj: Any, group: Any = None) -> list[Any] | None:
    """One picklable object per rank, on rank 0 only (None elsewhere): text moves to the writer, not to all."""
    if not distributed():
        return [obj]
    gate("gather_objects_to_main")
    dist = torch.distributed
    main = dist.get_rank() == 0
    out: list[Any] | None = [None] * dist.get_world_size() if main else None
    dist.gather_object(obj, out, dst=0, group=group)
    return out


def gather_feature_rows(host: Any, device_columns: Sequence[Any], device: Any = None, group: Any = None) -> Any:
    """Per-row numbers of every rank as one host array: ``host`` ``[rows, k]`` (numpy) joined by the device
    ``[rows]`` columns (None: zeros), gathered over ranks in one collective and moved to the host once."""
    rows = int(host.shape[0])
    if not device_columns and not distributed():
        return host
    if group is not None:  # rl_guards' own gloo group: the table crosses ranks from the host
        where = torch.device("cpu")
    else:
        where = next((c.device for c in device_columns if isinstance(c, torch.Tensor)), None)
        where = where if where is not None else (torch.device(device) if device is not None else torch.device("cpu"))
    table = torch.from_numpy(host).to(where)
    if device_columns:
        columns = [
            c.reshape(rows).to(device=where, dtype=torch.float64)
            if isinstance(c, torch.Tensor)
            else torch.zeros(rows, dtype=torch.float64, device=where)
            for c in device_columns
        ]
        table = torch.cat([table, torch.stack(columns, dim=1)], dim=1)
    return all_gather_rows(table, group).cpu().numpy()
