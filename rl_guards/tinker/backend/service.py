"""The local Tinker service: sessions, training clients, samplers, checkpoints, and the endpoints the SDK calls.

``Service.handle(method, path, headers, body)`` answers one HTTP request; :mod:`rl_guards.tinker.backend.server`
puts it behind a socket. Identifiers follow what the SDK assumes: ``model_id = "<session>:train:<model_seq_id>"``,
checkpoints ``tinker://<model_id>/weights/<name>`` and ``tinker://<model_id>/sampler_weights/<name>`` (the SDK splits
paths on ``/`` into exactly three parts, so ids hold no ``/``). Answers never use an empty 400 (the SDK retries it as
a Cloudflare reject) nor a 5xx (retried for minutes): a request that cannot run is a failed future (the client raises
``RequestFailedError`` with the message at once), a malformed one a 400 with a body.

Taps: ``service.taps`` holds callables given a :class:`TapEvent` for every request the backend executes, with what
it decoded (the datums of a ``forward_backward`` exactly as sent, sampled sequences, saves). A tap runs on the
worker thread before the request's result is published (before a ``forward_backward`` runs); a tap that raises fails
that request with its message, so a tap can veto a training step.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tinker import types

from rl_guards.tinker.backend import sampler as S
from rl_guards.tinker.backend.futures import ERROR, JSON, PROTO, Futures, Job, Result, Worker, failure
from rl_guards.tinker.backend.trainer import TrainedModel, load_model, load_snapshot
from rl_guards.tinker.backend.wire import (
    WireError,
    decode_forward_backward,
    forward_backward_output,
    json_of,
    prompt_tokens,
    sample_response,
)

logger = logging.getLogger("rl_guards.tinker.backend")

API = "/api/v1"
LONG_POLL_SECONDS = 20.0  # retrieve_future waits this long before answering try_again (the client waits 45 s)
DEFAULT_MAX_TOKENS = 128  # when a request sets none

# What the backend tells every client (fields of tinker.types.ClientConfigResponse): no auth exchange, plain httpx
# over http://, chunks of one forward_backward sent in order, uncompressed bodies.
CLIENT_CONFIG = {"pjwt_auth_enabled": False, "use_pyqwest_transport": False, "parallel_fwdbwd_chunks": False}


@dataclass
class TapEvent:
    """What a tap sees: ``name`` (``forward_backward``, ``optim_step``, ``sample``, ``save_weights``,
    ``save_weights_for_sampler``), the model or sampling session, and the decoded request (and result)."""

    name: str
    target: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sampler:
    """A sampling session: an immutable model (a snapshot or a base model) and how to stop and decode."""

    model: Any
    base_model: str
    model_path: str | None
    decode: Callable[[list[int]], str]
    eos_token_id: int | None
    requests: int = 0


class RequestError(ValueError):
    """A malformed request: answered 400 with the message."""


class Service:
    """Everything one local backend holds. Thread-safe: HTTP threads accept requests, one worker runs them."""

    def __init__(
        self,
        root: Path,
        models: dict[str, str] | None = None,
        *,
        seed: int = 0,
        long_poll: float = LONG_POLL_SECONDS,
    ) -> None:
        self.root = Path(root)
        self.models_by_name = dict(models or {})
        self.seed = int(seed)
        self.long_poll = float(long_poll)
        self.futures = Futures()
        self.worker = Worker(self.futures)
        self.taps: list[Callable[[TapEvent], None]] = []
        self.calls: dict[str, int] = {}
        self._lock = threading.RLock()
        self._sessions: dict[str, dict[str, Any]] = {}
        self._trained: dict[str, TrainedModel] = {}
        self._samplers: dict[str, Sampler] = {}
        self._checkpoints: dict[str, dict[str, Any]] = {}  # tinker path -> {"folder", "model_id", "kind"}
        self._seen: dict[tuple[str, str, int], str] = {}  # (endpoint, target, seq_id) -> request id (re-sends)
        self._tokenizers: dict[str, Any] = {}
        self._session_count = 0

    def close(self) -> None:
        self.worker.stop()

    # ----- HTTP ------------------------------------------------------------------------------------------------
    def handle(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, str, bytes]:
        """One request -> ``(status, content type, body)``."""
        route = path.split("?", 1)[0]
        name = route.removeprefix(API)
        key = "/samplers/*" if name.startswith("/samplers/") else name
        key = "/training_runs/*" if name.startswith("/training_runs/") else key
        key = "/sessions/*/finish" if name.startswith("/sessions/") else key
        with self._lock:
            self.calls[key] = self.calls.get(key, 0) + 1
        try:
            if name == "/forward_backward":
                return self._json(self._forward_backward(body, headers))
            request = json.loads(body) if body else {}
            if not isinstance(request, dict):
                raise RequestError("the request body must be a JSON object")
            handler = self._ROUTES.get(name)
            if handler is not None:
                out = handler(self, request)
            elif name.startswith("/samplers/"):
                out = self._get_sampler(name.removeprefix("/samplers/"))
            elif name.startswith("/training_runs/"):
                out = self._training_run(name.removeprefix("/training_runs/"))
            elif name.startswith("/sessions/") and name.endswith("/finish"):
                out = {}
            else:
                detail = {"detail": f"not served by the local backend: {path}"}
                return 404, "application/json", json.dumps(detail).encode()
            if isinstance(out, Result):
                return self._result(out)
            return self._json(out)
        except (RequestError, WireError, KeyError, ValueError, TypeError) as exc:
            return self._error(400, exc)
        except Exception as exc:  # the backend's own bug: a 400 with the reason, never a retried 5xx
            logger.exception("local Tinker backend: %s failed", path)
            return self._error(400, exc)

    @staticmethod
    def _json(out: dict[str, Any]) -> tuple[int, str, bytes]:
        return 200, "application/json", json.dumps(out).encode()

    @staticmethod
    def _error(status: int, exc: BaseException) -> tuple[int, str, bytes]:
        text = str(exc) or type(exc).__name__
        if isinstance(exc, KeyError):
            text = f"unknown id {exc.args[0]!r}" if exc.args else "unknown id"
        return status, "application/json", json.dumps({"detail": f"local Tinker backend: {text}"}).encode()

    def _result(self, result: Result) -> tuple[int, str, bytes]:
        if result.kind == PROTO:
            return 200, "application/x-protobuf", result.payload
        return self._json(result.payload)

    # ----- session and client config ------------------------------------------------------------------------------
    def _client_config(self, request: dict[str, Any]) -> dict[str, Any]:
        return dict(CLIENT_CONFIG)

    def _dynamic_config(self, request: dict[str, Any]) -> dict[str, Any]:
        return json_of(types.ClientDynamicConfigResponse())

    def _create_session(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._session_count += 1
            session_id = f"local-{self._session_count}-{int(time.time() * 1000) % 10**9}"
            self._sessions[session_id] = {"tags": request.get("tags"), "user_metadata": request.get("user_metadata")}
        return json_of(types.CreateSessionResponse(session_id=session_id))

    def _heartbeat(self, request: dict[str, Any]) -> dict[str, Any]:
        return json_of(types.SessionHeartbeatResponse())

    def _telemetry(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"status": "accepted"}

    # ----- models ------------------------------------------------------------------------------------------------
    def model_dir(self, base_model: str) -> str:
        """The folder a base model name stands for: the name map, else the name itself when it is a folder."""
        if base_model in self.models_by_name:
            return self.models_by_name[base_model]
        if Path(base_model).is_dir():
            return base_model
        known = sorted(self.models_by_name)
        raise RequestError(
            f"unknown base model {base_model!r}: the local backend serves local model folders"
            + (f" and {known}" if known else "")
            + " (LocalTinker(models={name: folder}) or --model NAME=DIR)"
        )

    def tokenizer(self, folder: str) -> Any:
        with self._lock:
            if folder not in self._tokenizers:
                from transformers import AutoTokenizer

                self._tokenizers[folder] = AutoTokenizer.from_pretrained(folder)
            return self._tokenizers[folder]

    def _submit(self, run: Callable[[], Result], **future: Any) -> dict[str, Any]:
        request_id = self.futures.new()
        self.worker.submit(Job(request_id, run=run))
        return {"request_id": request_id, **{k: v for k, v in future.items() if v is not None}}

    def _deduped(self, endpoint: str, target: str, seq_id: Any, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """A re-sent request (same endpoint, target and ``seq_id``) gets the future of the first send."""
        if seq_id is None:
            return make()
        key = (endpoint, target, int(seq_id))
        with self._lock:
            if key in self._seen:
                return {"request_id": self._seen[key], "model_id": target if endpoint != "asample" else None}
            out = make()
            self._seen[key] = out["request_id"]
            return out

    def _create_model(self, request: dict[str, Any]) -> dict[str, Any]:
        parsed = types.CreateModelRequest.model_validate(request)
        if parsed.session_id not in self._sessions:
            raise RequestError(f"unknown session {parsed.session_id!r}")
        model_id = f"{parsed.session_id}:train:{parsed.model_seq_id}"
        folder = self.model_dir(parsed.base_model)

        def run() -> Result:
            trained = TrainedModel(model_id, parsed.base_model, folder, parsed.user_metadata)
            with self._lock:
                self._trained[model_id] = trained
            return Result(JSON, json_of(types.CreateModelResponse(model_id=model_id)))

        return self._submit(run, model_id=model_id)

    def _trained_model(self, model_id: str) -> TrainedModel:
        with self._lock:
            trained = self._trained.get(model_id)
        if trained is None:
            raise RequestError(f"unknown model {model_id!r}")
        return trained

    def _get_info(self, request: dict[str, Any]) -> dict[str, Any]:
        trained = self._trained_model(request["model_id"])
        data = types.ModelData(
            arch=type(trained.model).__name__, model_name=trained.base_model, tokenizer_id=trained.path
        )
        response = types.GetInfoResponse(model_id=trained.model_id, model_data=data, is_lora=False)
        return json_of(response)

    def _forward_backward(self, body: bytes, headers: Any) -> dict[str, Any]:
        encoding = (headers.get("Content-Encoding") or "").lower() if headers is not None else ""
        if encoding == "zstd":
            import zstandard

            body = zstandard.ZstdDecompressor().decompress(body)
        request = decode_forward_backward(body)
        trained = self._trained_model(request.model_id)

        def run() -> Result:
            self._tap(
                TapEvent(
                    "forward_backward",
                    request.model_id,
                    {
                        "seq_id": request.seq_id,
                        "loss_fn": request.loss_fn,
                        "datums": request.datums,
                        "config": request.config,
                        "forward_only": request.forward_only,
                    },
                )
            )
            logprobs, metrics = trained.forward_backward(request)
            return Result(PROTO, forward_backward_output(logprobs, metrics))

        return self._deduped(
            "forward_backward", request.model_id, request.seq_id, lambda: self._submit(run, model_id=request.model_id)
        )

    def _optim_step(self, request: dict[str, Any]) -> dict[str, Any]:
        model_id = request["model_id"]
        trained = self._trained_model(model_id)
        params = request.get("adam_params") or request.get("optim_params") or {}
        if request.get("optimizer_params") is not None:
            raise RequestError("the local backend implements AdamW only (adam_params)")

        def run() -> Result:
            self._tap(TapEvent("optim_step", model_id, {"params": dict(params)}))
            metrics = trained.optim_step(params)
            return Result(JSON, json_of(types.OptimStepResponse(metrics=metrics)))

        seq_id = request.get("seq_id")
        return self._deduped("optim_step", model_id, seq_id, lambda: self._submit(run, model_id=model_id))

    # ----- weights and checkpoints --------------------------------------------------------------------------------
    def _folder(self, model_id: str, kind: str, name: str) -> Path:
        safe = model_id.replace(":", "_")
        return self.root / safe / kind / name

    def _new_sampler(self, model: Any, base_model: str, folder: str, model_path: str | None) -> str:
        tok = self.tokenizer(folder)
        with self._lock:
            sampler_id = f"sampler-{len(self._samplers)}"
            self._samplers[sampler_id] = Sampler(
                model,
                base_model,
                model_path,
                lambda ids: tok.decode(ids, skip_special_tokens=False),
                tok.eos_token_id,
            )
        return sampler_id

    def _save_weights_for_sampler(self, request: dict[str, Any]) -> dict[str, Any]:
        parsed = types.SaveWeightsForSamplerRequest.model_validate(request)
        trained = self._trained_model(parsed.model_id)

        def run() -> Result:
            snapshot = trained.snapshot()
            if parsed.path:
                path = f"tinker://{parsed.model_id}/sampler_weights/{parsed.path}"
                folder = self._folder(parsed.model_id, "sampler_weights", parsed.path)
                trained.save(folder, optimizer=False)
                sampler_id = self._new_sampler(snapshot, trained.base_model, trained.path, path)
                with self._lock:
                    self._checkpoints[path] = {"folder": folder, "model_id": parsed.model_id, "kind": "sampler",
                                               "sampler_id": sampler_id}  # fmt: skip
                self._tap(TapEvent("save_weights_for_sampler", parsed.model_id, {"name": parsed.path, "path": path}))
                return Result(JSON, json_of(types.SaveWeightsForSamplerResponseInternal(path=path)))
            sampler_id = self._new_sampler(snapshot, trained.base_model, trained.path, None)
            return Result(JSON, json_of(types.SaveWeightsForSamplerResponseInternal(sampling_session_id=sampler_id)))

        return self._deduped(
            "save_weights_for_sampler",
            parsed.model_id,
            parsed.seq_id,
            lambda: self._submit(run, model_id=parsed.model_id),
        )

    def _save_weights(self, request: dict[str, Any]) -> dict[str, Any]:
        parsed = types.SaveWeightsRequest.model_validate(request)
        trained = self._trained_model(parsed.model_id)
        name = parsed.path or f"step-{trained.steps}"

        def run() -> Result:
            path = f"tinker://{parsed.model_id}/weights/{name}"
            folder = self._folder(parsed.model_id, "weights", name)
            trained.save(folder, optimizer=True)
            with self._lock:
                self._checkpoints[path] = {"folder": folder, "model_id": parsed.model_id, "kind": "training"}
            self._tap(TapEvent("save_weights", parsed.model_id, {"name": name, "path": path}))
            return Result(JSON, json_of(types.SaveWeightsResponse(path=path)))

        return self._deduped(
            "save_weights", parsed.model_id, parsed.seq_id, lambda: self._submit(run, model_id=parsed.model_id)
        )

    def _checkpoint(self, path: str, kind: str) -> dict[str, Any]:
        with self._lock:
            known = self._checkpoints.get(path)
        if known is not None:
            return known
        parsed = types.ParsedCheckpointTinkerPath.from_tinker_path(path)
        segment = "weights" if kind == "training" else "sampler_weights"
        folder = self._folder(parsed.training_run_id, segment, parsed.checkpoint_id)
        if not (folder / "state.pt").is_file():
            raise RequestError(f"no checkpoint {path!r} on this backend (looked in {folder})")
        return {"folder": folder, "model_id": parsed.training_run_id, "kind": kind}

    def _load_weights(self, request: dict[str, Any]) -> dict[str, Any]:
        parsed = types.LoadWeightsRequest.model_validate(request)
        checkpoint = self._checkpoint(parsed.path, "training")
        folder: Path = checkpoint["folder"]
        if parsed.model_id is not None:
            model_id = parsed.model_id
        else:
            if parsed.session_id is None or parsed.model_seq_id is None:
                raise RequestError("load_weights needs model_id, or session_id and model_seq_id")
            model_id = f"{parsed.session_id}:train:{parsed.model_seq_id}"

        def run() -> Result:
            import torch

            with self._lock:
                trained = self._trained.get(model_id)
            if trained is None:
                state = torch.load(folder / "state.pt", map_location="cpu", weights_only=False)
                base = parsed.base_model or state.get("base_model")
                trained = TrainedModel(model_id, base, self.model_dir(base), parsed.user_metadata)
                with self._lock:
                    self._trained[model_id] = trained
            trained.load(folder, optimizer=parsed.optimizer)
            return Result(JSON, json_of(types.LoadWeightsResponse(path=parsed.path, model_id=model_id)))

        return self._submit(run, model_id=model_id)

    def _create_sampling_session(self, request: dict[str, Any]) -> dict[str, Any]:
        parsed = types.CreateSamplingSessionRequest.model_validate(request)
        if parsed.model_path:
            checkpoint = self._checkpoint(parsed.model_path, "sampler")
            sampler_id = checkpoint.get("sampler_id")
            if sampler_id is not None:  # saved by this process: a new session on the same snapshot
                with self._lock:
                    known = self._samplers[sampler_id]
                sampler_id = self._new_sampler(known.model, known.base_model, self.model_dir(known.base_model),
                                               parsed.model_path)  # fmt: skip
            else:
                trained = self._trained.get(checkpoint["model_id"])
                base = trained.base_model if trained is not None else self._base_of(checkpoint["folder"])
                folder = self.model_dir(base)
                sampler_id = self._new_sampler(load_snapshot(folder, checkpoint["folder"]), base, folder,
                                               parsed.model_path)  # fmt: skip
        elif parsed.base_model:
            folder = self.model_dir(parsed.base_model)
            sampler_id = self._new_sampler(load_model(folder).eval(), parsed.base_model, folder, None)
        else:
            raise RequestError("create_sampling_session needs model_path or base_model")
        return json_of(types.CreateSamplingSessionResponse(sampling_session_id=sampler_id))

    @staticmethod
    def _base_of(folder: Path) -> str:
        import torch

        return str(torch.load(folder / "state.pt", map_location="cpu", weights_only=False).get("base_model"))

    def _get_sampler(self, sampler_id: str) -> dict[str, Any]:
        with self._lock:
            sampler = self._samplers.get(sampler_id)
        if sampler is None:
            raise RequestError(f"unknown sampler {sampler_id!r}")
        response = types.GetSamplerResponse(
            sampler_id=sampler_id, base_model=sampler.base_model, model_path=sampler.model_path
        )
        return json_of(response)

    def _training_run(self, run_id: str) -> dict[str, Any]:
        from datetime import datetime, timezone

        with self._lock:
            trained = self._trained.get(run_id)
        if trained is not None:
            base_model, user_metadata = trained.base_model, trained.user_metadata
        else:  # a run this process did not train: its newest checkpoint on disk (a restarted backend, same root)
            saved = sorted(self._folder(run_id, "weights", "").glob("*/state.pt"), key=lambda p: p.stat().st_mtime)
            if not saved:
                raise RequestError(f"unknown training run {run_id!r}")
            import torch

            state = torch.load(saved[-1], map_location="cpu", weights_only=False)
            base_model, user_metadata = str(state.get("base_model")), dict(state.get("user_metadata") or {})
        metadata = {str(k): str(v) for k, v in user_metadata.items()}
        run = types.TrainingRun(
            training_run_id=run_id,
            base_model=base_model,
            model_owner="local",
            is_lora=False,
            last_request_time=datetime.now(timezone.utc),
            user_metadata=metadata or None,
        )
        return run.model_dump(mode="json", exclude_none=True)

    # ----- sampling ------------------------------------------------------------------------------------------------
    def _asample(self, request: dict[str, Any]) -> dict[str, Any]:
        sampler_id = request.get("sampling_session_id")
        with self._lock:
            sampler = self._samplers.get(sampler_id) if sampler_id else None
        if sampler is None:
            raise RequestError(
                f"unknown sampling session {sampler_id!r} (the local backend samples from sessions only: "
                "save_weights_for_sampler / create_sampling_session first)"
            )
        params = request.get("sampling_params") or {}
        prompt = prompt_tokens(request.get("prompt") or {})
        n = int(request.get("num_samples") or 1)
        seq_id = request.get("seq_id")
        sequence_ids = [f"{sampler_id}:{seq_id}:{i}" for i in range(n)]
        rows = []
        seed = params.get("seed")
        for i in range(n):
            row_seed = S.derive_seed(seed, i) if seed is not None else S.derive_seed(self.seed, sampler_id, seq_id, i)
            rows.append(
                S.Row(
                    prompt=prompt,
                    max_tokens=int(params.get("max_tokens") or DEFAULT_MAX_TOKENS),
                    temperature=float(params.get("temperature", 1.0)),
                    top_k=int(params.get("top_k", -1)),
                    top_p=float(params.get("top_p", 1.0)),
                    stop=S.StopRule.of(params.get("stop"), sampler.eos_token_id),
                    seed=row_seed,
                )
            )
        want_prompt_logprobs = bool(request.get("prompt_logprobs"))
        request_id = self.futures.new()
        job = Job(
            request_id,
            batch_key=sampler_id,
            run_batch=lambda jobs: self._run_samples(sampler, jobs),
            data={
                "rows": rows,
                "prompt": prompt,
                "sequence_ids": sequence_ids,
                "prompt_logprobs": want_prompt_logprobs,
                "sampler_id": sampler_id,
            },
        )
        self.worker.submit(job)
        return {"request_id": request_id, "sample_sequence_ids": sequence_ids}

    def _run_samples(self, sampler: Sampler, jobs: list[Job]) -> list[Result]:
        rows = [row for job in jobs for row in job.data["rows"]]
        try:
            sampled = S.sample_rows(sampler.model, rows, sampler.decode)
        except Exception as exc:
            return [failure(exc)] * len(jobs)
        results: list[Result] = []
        start = 0
        for job in jobs:
            n = len(job.data["rows"])
            mine = sampled[start : start + n]
            start += n
            try:
                prompt_lp = None
                if job.data["prompt_logprobs"]:
                    prompt_lp = S.prompt_logprobs(sampler.model, job.data["prompt"])
                self._tap(
                    TapEvent(
                        "sample",
                        job.data["sampler_id"],
                        {"prompt": job.data["prompt"], "sequences": mine, "sequence_ids": job.data["sequence_ids"]},
                    )
                )
                results.append(Result(PROTO, sample_response(mine, prompt_lp)))
            except Exception as exc:
                results.append(failure(exc))
        sampler.requests += len(jobs)
        return results

    # ----- futures --------------------------------------------------------------------------------------------------
    def _retrieve_future(self, request: dict[str, Any]) -> Result | dict[str, Any]:
        request_id = request["request_id"]
        try:
            result = self.futures.wait(request_id, self.long_poll)
        except KeyError:
            return Result(ERROR, {"error": f"unknown request {request_id!r}", "category": "user"})
        if result is None:
            return {"type": "try_again", "request_id": request_id, "queue_state": "active"}
        return result

    # ----- taps -------------------------------------------------------------------------------------------------------
    def _tap(self, event: TapEvent) -> None:
        for tap in list(self.taps):
            tap(event)

    _ROUTES: ClassVar[dict[str, Callable[[Service, dict[str, Any]], Any]]] = {
        "/client/config": _client_config,
        "/client/dynamic_config": _dynamic_config,
        "/create_session": _create_session,
        "/session_heartbeat": _heartbeat,
        "/telemetry": _telemetry,
        "/create_model": _create_model,
        "/get_info": _get_info,
        "/optim_step": _optim_step,
        "/save_weights_for_sampler": _save_weights_for_sampler,
        "/save_weights": _save_weights,
        "/load_weights": _load_weights,
        "/create_sampling_session": _create_sampling_session,
        "/asample": _asample,
        "/retrieve_future": _retrieve_future,
    }


__all__ = ["API", "CLIENT_CONFIG", "RequestError", "Sampler", "Service", "TapEvent"]
