"""A local backend that speaks the Tinker API: dry-run a tinker-cookbook recipe on a laptop, on CPU, before GPU time.

::

    from rl_guards.tinker.backend import LocalTinker

    with LocalTinker(models={"Qwen/Qwen3-0.6B": "/models/qwen3-0.6b"}) as local:
        config = chz.replace(config, base_url=local.url)   # the recipe's own Config, nothing else changed
        asyncio.run(train.main(config))                    # the cookbook's loop, unmodified

or in another process (for a recipe's own command line)::

    python -m rl_guards.tinker.backend --model Qwen/Qwen3-0.6B=/models/qwen3-0.6b --port 8765
    TINKER_API_KEY=tml-local python -m tinker_cookbook.recipes.math_rl.train base_url=http://127.0.0.1:8765 ...

What it implements: sessions, training clients (full fine-tuning of a local Hugging Face causal LM, float32: Tinker
trains LoRA adapters, so learning rates do not carry over), ``forward_backward`` with the losses ``cross_entropy``,
``importance_sampling``, ``ppo`` and ``cispo``, AdamW ``optim_step``, samplers from snapshots of the weights
(``save_weights_for_sampler``), sampling with stop tokens / strings, seeds and prompt log-probabilities, checkpoints
(``save_weights``, ``load_weights``: a run resumes), and the SDK's futures (long poll). Not implemented: images and
audio, ``stable_reinforce`` / ``dro`` / ``gspo`` / custom losses (refused with a message), other optimizers, LoRA.
Models are local folders (``AutoModelForCausalLM.from_pretrained``); ``models`` maps names such as
``"Qwen/Qwen3-0.6B"`` to folders. The cookbook loads its tokenizer from ``model_name`` itself: with a name that is
not a folder, register the tokenizer with ``tinker_cookbook.tokenizer_utils.register_tokenizer`` in the same process,
or pass the folder as ``model_name``.

Taps (:attr:`LocalTinker.taps`) see every request the backend executes, decoded (the datums a ``forward_backward``
trains on, exactly as sent); a tap that raises fails that request with its message.

The backend imports nothing from rl_guards (it is infrastructure, usable without the guards); torch runs with
``threads`` intra-op threads (1 by default: it shares the machine with the loop).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from rl_guards.tinker.backend.server import Server
from rl_guards.tinker.backend.service import Service, TapEvent

API_KEY = "tml-local"  # the SDK wants a key starting "tml-"; the local backend checks none


class LocalTinker:
    """The local backend on ``127.0.0.1`` (a free port unless ``port`` is given), in a daemon thread.

    ``root``: where checkpoints go (a temporary folder, removed on :meth:`stop`, when None). ``seed``: the sampling
    seed of requests that set none. ``threads``: torch intra-op threads (process-wide; None leaves them as they are).
    """

    def __init__(
        self,
        models: dict[str, str] | None = None,
        *,
        root: str | os.PathLike[str] | None = None,
        seed: int = 0,
        threads: int | None = 1,
        port: int = 0,
        long_poll: float | None = None,
    ) -> None:
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="local-tinker-")) if root is None else Path(root)
        kwargs: dict[str, Any] = {} if long_poll is None else {"long_poll": long_poll}
        self.service = Service(self.root, models, seed=seed, **kwargs)
        self.threads = threads
        self._server = Server(self.service, port=port)
        self._started = False

    @property
    def url(self) -> str:
        """The base URL to give the SDK (``Config.base_url`` in the cookbook)."""
        return self._server.url

    @property
    def taps(self) -> list[Callable[[TapEvent], None]]:
        """Callables given every executed request (see :class:`~rl_guards.tinker.backend.service.TapEvent`)."""
        return self.service.taps

    @property
    def calls(self) -> dict[str, int]:
        """Requests served, per endpoint."""
        return dict(self.service.calls)

    def environ(self) -> dict[str, str]:
        """What the SDK needs in the environment to talk to this backend (a key, no telemetry)."""
        return {"TINKER_API_KEY": API_KEY, "TINKER_TELEMETRY": "0"}

    def start(self) -> LocalTinker:
        """Serve; the SDK's environment variables are set where unset (``TINKER_API_KEY``, ``TINKER_TELEMETRY``)."""
        if not self._started:
            if self.threads is not None:
                import torch

                torch.set_num_threads(int(self.threads))
            for key, value in self.environ().items():
                os.environ.setdefault(key, value)
            self._server.start()
            self._started = True
        return self

    def stop(self) -> None:
        """Stop serving and the worker; the temporary root is removed."""
        if self._started:
            self._server.stop()
            self._started = False
        self.service.close()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalTinker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


__all__ = ["API_KEY", "LocalTinker", "TapEvent"]
