"""The few collectives rl_guards runs across ranks: small fixed-size integer vectors, summed or maxed.

Every rank must call them at the same points, with vectors of the same length: callers never put one inside a
branch that only some ranks take. Without ``torch.distributed`` (or with one process) they return the input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def distributed() -> bool:
    """True when ``torch.distributed`` is initialised with more than one rank."""
    dist = torch.distributed
    return bool(dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


def _device(device: Any = None) -> torch.device:
    if device is not None:
        return torch.device(device)
    if torch.distributed.get_backend() == "nccl":  # NCCL reduces CUDA tensors only
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_ints(values: Sequence[int], op: str = "sum", device: Any = None) -> list[int]:
    """Element-wise ``sum`` or ``max`` of an integer vector over every rank (one collective)."""
    if not distributed():
        return [int(v) for v in values]
    dist = torch.distributed
    tensor = torch.tensor([int(v) for v in values], dtype=torch.long, device=_device(device))
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return [int(v) for v in tensor.tolist()]


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """A tensor summed over every rank (a copy); the tensor itself without a process group."""
    if not distributed():
        return t
    t = t.clone()
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
    return t


def all_gather_rows(local: torch.Tensor) -> torch.Tensor:
    """``[rows, k]`` on each rank -> ``[ranks * rows, k]`` (rank order) on every rank, on the tensor's device.

    Every rank must pass the same shape (TRL gives every rank the same number of rows per batch).
    """
    if not distributed():
        return local
    dist = torch.distributed
    device = _device(local.device if local.device.type != "cpu" else None)
    local = local.to(device).contiguous()
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local)
    return torch.cat(parts, dim=0)


def all_gather_objects(obj: Any) -> list[Any]:
    """One picklable object per rank, on every rank (rank order)."""
    if not distributed():
        return [obj]
    out: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def gather_objects_to_main(obj: Any) -> list[Any] | None:
    """One picklable object per rank, on rank 0 only (None elsewhere): text moves to the writer, not to all."""
    if not distributed():
        return [obj]
    dist = torch.distributed
    main = dist.get_rank() == 0
    out: list[Any] | None = [None] * dist.get_world_size() if main else None
    dist.gather_object(obj, out, dst=0)
    return out


def gather_feature_rows(host: Any, device_columns: Sequence[Any], device: Any = None) -> Any:
    """Per-row numbers of every rank as one host array: ``host`` ``[rows, k]`` (numpy) joined by the device
    ``[rows]`` columns (None: zeros), gathered over ranks in one collective and moved to the host once."""
    rows = int(host.shape[0])
    if not device_columns and not distributed():
        return host
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
    return all_gather_rows(table).cpu().numpy()
