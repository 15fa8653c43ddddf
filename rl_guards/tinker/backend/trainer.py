"""A trained model: ``forward_backward``, ``optim_step``, snapshots for samplers, saves and loads.

Full fine-tuning of the whole model in float32 (Tinker trains a LoRA adapter; the local backend keeps no adapter, so
learning-rate scales are not Tinker's: it is for checking a loop, not for tuning one). Gradients of every datum and
every ``forward_backward`` call add up until ``optim_step`` applies AdamW (the SDK documents ``torch.optim.AdamW``
with decoupled weight decay) and clears them.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rl_guards.tinker.backend.losses import UnsupportedLoss, loss_function
from rl_guards.tinker.backend.wire import FwdBwdRequest, datum_inputs, datum_tokens


def load_model(path: str) -> Any:
    """A causal LM from a local folder, float32, in train mode."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.train()
    return model


class TrainedModel:
    """One training client's model on the local backend."""

    def __init__(self, model_id: str, base_model: str, path: str, user_metadata: dict[str, Any] | None) -> None:
        self.model_id = model_id
        self.base_model = base_model  # the name the client asked for
        self.path = path  # the folder it was loaded from
        self.user_metadata = dict(user_metadata or {})
        self.model = load_model(path)
        self.optimizer: torch.optim.AdamW | None = None
        self.steps = 0  # optimizer steps taken

    # ----- training ------------------------------------------------------------------------------------------
    def forward_backward(self, request: FwdBwdRequest) -> tuple[list[np.ndarray], dict[str, float]]:
        """Per datum: the target tokens' log-probabilities; the loss summed over datums (``loss:sum``)."""
        loss_fn = loss_function(request.loss_fn)
        self.model.train()
        outputs: list[np.ndarray] = []
        total = 0.0
        for index, datum in enumerate(request.datums):
            tokens = datum_tokens(datum)
            inputs = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in datum_inputs(datum).items()}
            targets = inputs.get("target_tokens")
            if targets is None:
                raise UnsupportedLoss(f"datum {index} has no target_tokens")
            if targets.dim() != 1 or targets.numel() != len(tokens):
                raise UnsupportedLoss(
                    f"datum {index}: target_tokens has shape {list(targets.shape)} for {len(tokens)} input tokens "
                    "(the local backend takes one target per input position)"
                )
            for name, tensor in inputs.items():
                if tensor.shape != targets.shape:
                    raise UnsupportedLoss(f"datum {index}: {name} has shape {list(tensor.shape)}, not {len(tokens)}")
            with torch.set_grad_enabled(not request.forward_only):
                logits = self.model(input_ids=torch.tensor([tokens])).logits[0].float()
                lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.long()[:, None])[:, 0]
                loss = loss_fn(lp, inputs, request.config)
                if not request.forward_only:
                    loss.backward()
            total += float(loss.detach())
            outputs.append(lp.detach().numpy().astype(np.float32))
        return outputs, {"loss:sum": total}

    def optim_step(self, params: dict[str, Any]) -> dict[str, float]:
        """One AdamW step with ``params`` (the client's ``AdamParams``), then gradients cleared."""
        lr = float(params.get("learning_rate", 1e-4))
        betas = (float(params.get("beta1", 0.9)), float(params.get("beta2", 0.95)))
        eps = float(params.get("eps", 1e-12))
        weight_decay = float(params.get("weight_decay", 0.0))
        if self.optimizer is None:
            self.optimizer = torch.optim.AdamW(
                self.model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=weight_decay
            )
        for group in self.optimizer.param_groups:  # the learning rate may change from step to step
            group.update(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        clip = float(params.get("grad_clip_norm") or 0.0)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip > 0 else float("inf"))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        return {"grad_norm:mean": float(norm)}

    # ----- weights ---------------------------------------------------------------------------------------------
    def snapshot(self) -> Any:
        """An immutable copy of the current weights for a sampler (eval mode)."""
        return copy.deepcopy(self.model).eval()

    def save(self, folder: Path, *, optimizer: bool) -> None:
        """Weights (and optimizer state) to ``folder/state.pt``."""
        folder.mkdir(parents=True, exist_ok=True)
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict() if optimizer and self.optimizer is not None else None,
            "steps": self.steps,
            "base_model": self.base_model,
            "user_metadata": self.user_metadata,
        }
        tmp = folder / "state.pt.tmp"
        torch.save(state, tmp)
        tmp.replace(folder / "state.pt")

    def load(self, folder: Path, *, optimizer: bool) -> None:
        """Weights (and, with ``optimizer``, the optimizer state) from a :meth:`save` folder."""
        state = torch.load(folder / "state.pt", map_location="cpu", weights_only=False)
        self.model.load_state_dict(state["model"])
        self.optimizer = None
        if optimizer and state.get("optimizer") is not None:
            self.optimizer = torch.optim.AdamW(self.model.parameters())
            self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state.get("steps", 0))


def load_snapshot(path: str, folder: Path) -> Any:
    """A sampler model from a base folder and saved weights."""
    model = load_model(path)
    state = torch.load(folder / "state.pt", map_location="cpu", weights_only=False)
    model.load_state_dict(state["model"])
    return model.eval()


__all__ = ["TrainedModel", "load_model", "load_snapshot"]
