"""A CPU stand-in for verl's rollout server (vLLM / SGLang): the tiny model generates, verl does the rest.

verl's agent loop asks its LLM server client for tokens (``await client.generate(request_id=, prompt_ids=,
sampling_params=, ...) -> TokenOutput``); everything around that call (chat template, tokenization, padding,
truncation at ``response_length``, the reward workers, the trainer's batch) is verl's own code. This client
answers with the tiny model's sampled tokens, so verl's rollout path runs for real on a laptop CPU::

    from rl_guards.testing import tiny_setup
    from rl_guards.testing.verl_server import TinyRolloutServer

    server = TinyRolloutServer(tiny_setup().model_dir, max_new_tokens=32)
    manager = AgentLoopManager.create(config=config, llm_client=server, reward_loop_worker_handles=...)

``canned`` plants a reply: when a prompt's text contains a marker, the reply is the given text (its tokens, plus
the EOS token when ``eos`` is true) instead of a generation; ``""`` with ``eos=False`` is an empty response. The
object is pickled into verl's agent-loop actors; each process loads the model on first use.
"""

from __future__ import annotations

import itertools
from typing import Any


class TinyRolloutServer:
    """Generates with a causal LM saved in ``model_dir`` (the tiny fixture's), as verl's ``LLMServerClient``."""

    def __init__(
        self,
        model_dir: str,
        max_new_tokens: int,
        *,
        seed: int = 0,
        canned: dict[str, tuple[str, bool]] | None = None,
    ) -> None:
        self.model_dir = str(model_dir)
        self.max_new_tokens = int(max_new_tokens)
        self.seed = int(seed)
        self.canned = dict(canned or {})
        self._loaded: tuple[Any, Any] | None = None
        self._calls = itertools.count()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_loaded"] = None  # each process loads its own copy
        state["_calls"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._calls = itertools.count()

    def _model(self) -> tuple[Any, Any]:
        if self._loaded is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            torch.set_num_threads(1)
            model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32)
            model.eval()
            self._loaded = (model, AutoTokenizer.from_pretrained(self.model_dir))
        return self._loaded

    def reply(self, prompt_ids: list[int], temperature: float, top_p: float) -> list[int]:
        """The response token ids for one prompt (EOS kept, nothing after it)."""
        import torch

        model, tokenizer = self._model()
        eos = int(tokenizer.eos_token_id)
        text = tokenizer.decode(prompt_ids, skip_special_tokens=False)
        for marker, (canned, with_eos) in self.canned.items():
            if marker in text:
                ids = tokenizer(canned, add_special_tokens=False)["input_ids"] if canned else []
                return [*ids, eos] if with_eos else list(ids)
        torch.manual_seed(self.seed * 1_000_003 + next(self._calls))
        sample = temperature > 0
        with torch.no_grad():
            out = model.generate(
                torch.tensor([prompt_ids]),
                attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                do_sample=sample,
                temperature=temperature if sample else None,
                top_p=top_p if sample else None,
                top_k=None,
                max_new_tokens=self.max_new_tokens,
                eos_token_id=eos,
                pad_token_id=tokenizer.pad_token_id,
            )
        ids = out[0, len(prompt_ids) :].tolist()
        return ids[: ids.index(eos) + 1] if eos in ids else ids

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any):
        """verl's ``LLMServerClient.generate``: one prompt's response tokens as a ``TokenOutput``."""
        from verl.workers.rollout.replica import TokenOutput

        temperature = float(sampling_params.get("temperature", 1.0) or 0.0)
        top_p = float(sampling_params.get("top_p", 1.0) or 1.0)
        ids = self.reply(list(prompt_ids), temperature, top_p)
        return TokenOutput(token_ids=ids, stop_reason="completed")


__all__ = ["TinyRolloutServer"]
