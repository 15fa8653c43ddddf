"""The Tinker wire format, both ways, with the SDK's own types.

JSON bodies are the SDK's pydantic request types (``model_dump(mode="json", exclude_none=True)``); replies are built
from its response types so that the client's strict validation accepts them. ``forward_backward`` requests and the
``SampleResponse`` / ``ForwardBackwardOutput`` results are protobuf (``tinker.proto.tinker_public_pb2``): the SDK
encodes the request (``request_conv``) and decodes the results (``response_conv``); this module is the server's
side of both, tested against those two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tinker
from tinker.proto import tinker_public_pb2 as pb

_NUMPY = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}
_NAME = {pb.DTYPE_FLOAT32: "float32", pb.DTYPE_INT64: "int64", pb.DTYPE_INT32: "int64"}


class WireError(ValueError):
    """A request the local backend cannot read (the message says what); answered as a user error."""


@dataclass
class FwdBwdRequest:
    """A decoded ``forward_backward`` request."""

    model_id: str
    seq_id: int
    loss_fn: str
    forward_only: bool
    datums: list[tinker.Datum]
    config: dict[str, Any] = field(default_factory=dict)


def dense(tensor: pb.Tensor) -> np.ndarray:
    """A proto ``Tensor`` (dense or sparse CSR) as a dense numpy array of its shape."""
    dtype = _NUMPY.get(tensor.dtype)
    if dtype is None:
        raise WireError(f"tensor dtype {tensor.dtype} is not supported (float32, int64)")
    shape = [int(s) for s in tensor.shape]
    if tensor.HasField("sparse_csr"):
        csr = tensor.sparse_csr
        values = np.frombuffer(csr.values, dtype=dtype)
        crow = np.frombuffer(csr.crow_indices, dtype=np.int64)
        col = np.frombuffer(csr.col_indices, dtype=np.int64)
        if len(shape) != 2:
            raise WireError(f"a sparse CSR tensor must be 2-D, got shape {shape}")
        out = np.zeros(shape, dtype=dtype)
        for row in range(shape[0]):
            lo, hi = int(crow[row]), int(crow[row + 1])
            out[row, col[lo:hi]] = values[lo:hi]
        return out
    array = np.frombuffer(tensor.dense, dtype=dtype).copy()
    return array.reshape(shape) if shape else array


def _chunk(chunk: pb.Chunk) -> tinker.EncodedTextChunk:
    kind = chunk.WhichOneof("chunk")
    if kind != "encoded_text":
        raise WireError(f"model input chunks of type {kind!r} are not supported by the local backend (text only)")
    return tinker.EncodedTextChunk(tokens=np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())


def _span(span: pb.ProvenanceSpan) -> Any:
    arm = span.WhichOneof("span")
    if arm == "sampled_tokens":
        s = span.sampled_tokens
        return tinker.SampledProvenanceSpan(sequence_id=s.sequence_id, length=s.length, offset=s.offset)
    s = span.prompt_tokens
    return tinker.PromptProvenanceSpan(sequence_id=s.sequence_id, length=s.length, offset=s.offset)


def decode_forward_backward(body: bytes) -> FwdBwdRequest:
    """A proto ``ForwardBackwardRequest`` body as the SDK's own ``Datum`` objects (what the client sent)."""
    request = pb.ForwardBackwardRequest()
    try:
        request.ParseFromString(body)
    except Exception as exc:
        raise WireError(f"not a ForwardBackwardRequest: {exc}") from None
    datums: list[tinker.Datum] = []
    for d in request.data:
        model_input = tinker.ModelInput(chunks=[_chunk(c) for c in d.model_input])
        inputs = {}
        for name, tensor in d.loss_fn_inputs.items():
            array = dense(tensor)
            inputs[name] = tinker.TensorData(data=array, dtype=_NAME[tensor.dtype], shape=list(array.shape))
        spans_in = [_span(s) for s in d.model_input_spans] or None
        spans_out = [_span(s) for s in d.loss_fn_input_spans] or None
        if (spans_in is None) != (spans_out is None):
            spans_in = spans_out = None
        datums.append(
            tinker.Datum(
                model_input=model_input,
                loss_fn_inputs=inputs,
                model_input_spans=spans_in,
                loss_fn_input_spans=spans_out,
            )
        )
    config: dict[str, Any] = {k: float(v) for k, v in request.loss_fn_config.items()}
    for key, value in request.loss_fn_config_v2.items():  # v2 wins where both are set
        config[key] = value.text if value.WhichOneof("value") == "text" else float(value.number)
    return FwdBwdRequest(
        model_id=request.model_id,
        seq_id=int(request.seq_id),
        loss_fn=request.loss_fn,
        forward_only=bool(request.forward_only),
        datums=datums,
        config=config,
    )


def datum_tokens(datum: tinker.Datum) -> list[int]:
    """The input tokens of a datum (text chunks only)."""
    out: list[int] = []
    for chunk in datum.model_input.chunks:
        tokens = getattr(chunk, "tokens", None)
        if tokens is None:
            raise WireError(f"model input chunk {type(chunk).__name__} is not supported (text only)")
        out.extend(int(t) for t in tokens)
    return out


def datum_inputs(datum: tinker.Datum) -> dict[str, np.ndarray]:
    """A datum's ``loss_fn_inputs`` as numpy arrays."""
    return {name: np.asarray(td.to_numpy()) for name, td in datum.loss_fn_inputs.items()}


def forward_backward_output(logprobs: Sequence[np.ndarray], metrics: dict[str, float]) -> bytes:
    """The proto ``ForwardBackwardOutput``: one ``ArrayRecord`` with each datum's ``logprobs`` (float32)."""
    arrays = [np.ascontiguousarray(a, dtype=np.float32).reshape(-1) for a in logprobs]
    data = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.float32)
    offsets = np.cumsum([0] + [a.nbytes for a in arrays]).astype(np.int64)
    record = pb.ArrayRecord(type_tag="ArrayRecord", num_datums=len(arrays))
    record.fields["logprobs"].CopyFrom(
        pb.BatchedTensor(data=data.tobytes(), offsets=offsets.tobytes(), dtype=pb.DTYPE_FLOAT32)
    )
    out = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=[record])
    for key, value in metrics.items():
        out.metrics[key] = float(value)
    return out.SerializeToString()


@dataclass
class Sampled:
    """One sampled sequence: its tokens (the stop token included), their log-probabilities, why it stopped."""

    tokens: list[int]
    logprobs: list[float]
    stop_reason: str  # "stop" or "length"


def sample_response(sequences: Sequence[Sampled], prompt_logprobs: Sequence[float] | None = None) -> bytes:
    """The proto ``SampleResponse``."""
    out = pb.SampleResponse()
    for seq in sequences:
        out.sequences.add(
            stop_reason=pb.STOP_REASON_STOP if seq.stop_reason == "stop" else pb.STOP_REASON_LENGTH,
            tokens=np.asarray(seq.tokens, dtype=np.int32).tobytes(),
            logprobs=np.asarray(seq.logprobs, dtype=np.float32).tobytes(),
        )
    if prompt_logprobs is not None:
        out.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    return out.SerializeToString()


def prompt_tokens(prompt: dict[str, Any]) -> list[int]:
    """The tokens of a JSON ``ModelInput`` (text chunks only)."""
    out: list[int] = []
    for chunk in prompt.get("chunks") or []:
        if chunk.get("type", "encoded_text") != "encoded_text":
            raise WireError(f"prompt chunks of type {chunk.get('type')!r} are not supported (text only)")
        out.extend(int(t) for t in chunk.get("tokens") or [])
    return out


def json_of(model: Any) -> dict[str, Any]:
    """A pydantic SDK response type as the JSON the client validates."""
    return model.model_dump(mode="json", exclude_none=True)


__all__ = [
    "FwdBwdRequest",
    "Sampled",
    "WireError",
    "datum_inputs",
    "datum_tokens",
    "decode_forward_backward",
    "dense",
    "forward_backward_output",
    "json_of",
    "prompt_tokens",
    "sample_response",
]
