"""The local Tinker backend: losses against their formulas, the wire format against the SDK's own encoder and
decoders, sampling's stop rules on the tiny model, and the real SDK client driving it end to end."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pytest

tinker = pytest.importorskip("tinker")
torch = pytest.importorskip("torch")

from tinker import types  # noqa: E402
from tinker.proto import tinker_public_pb2 as pb  # noqa: E402
from tinker.proto.request_conv import forward_backward_request_to_proto  # noqa: E402
from tinker.proto.response_conv import (  # noqa: E402
    deserialize_forward_backward_output,
    deserialize_sample_response,
)

from rl_guards.tinker.backend import losses, sampler, wire  # noqa: E402


# ----- losses -------------------------------------------------------------------------------------------------------
def _inputs() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    lp = torch.tensor([-0.5, -1.2, -0.1, -2.0], requires_grad=True)
    inputs = {
        "logprobs": torch.tensor([-0.7, -1.0, -0.1, -1.0]),
        "advantages": torch.tensor([0.0, 1.5, -2.0, 0.5]),
        "weights": torch.tensor([0.0, 1.0, 1.0, 0.0]),
        "target_tokens": torch.tensor([1, 2, 3, 4]),
    }
    return lp, inputs


def test_losses_are_plain_sums_of_their_formulas() -> None:
    lp, inputs = _inputs()
    lq, adv, w = inputs["logprobs"].tolist(), inputs["advantages"].tolist(), inputs["weights"].tolist()
    x = lp.tolist()
    ratios = [math.exp(a - b) for a, b in zip(x, lq, strict=True)]
    expected = {
        "cross_entropy": -sum(wi * xi for wi, xi in zip(w, x, strict=True)),
        "importance_sampling": -sum(r * a for r, a in zip(ratios, adv, strict=True)),
        "ppo": -sum(min(r * a, min(max(r, 0.8), 1.2) * a) for r, a in zip(ratios, adv, strict=True)),
        "cispo": -sum(min(max(r, 0.8), 1.2) * xi * a for r, xi, a in zip(ratios, x, adv, strict=True)),
    }
    for name, value in expected.items():
        got = losses.loss_function(name)(lp, inputs, {}).detach()
        assert float(got) == pytest.approx(value, rel=1e-6), name


def test_ppo_clip_thresholds_come_from_the_config_and_cispo_stops_the_ratio_gradient() -> None:
    lp, inputs = _inputs()
    wide = losses.ppo(lp, inputs, {"clip_low_threshold": 0.0, "clip_high_threshold": 100.0}).detach()
    assert float(wide) == pytest.approx(float(losses.importance_sampling(lp, inputs, {}).detach()), rel=1e-6)
    loss = losses.cispo(lp, inputs, {})
    loss.backward()
    ratio = torch.exp(lp.detach() - inputs["logprobs"]).clamp(0.8, 1.2)
    assert torch.allclose(lp.grad, -ratio * inputs["advantages"])


def test_an_unknown_loss_is_refused_with_the_ones_there_are() -> None:
    with pytest.raises(losses.UnsupportedLoss, match=r"stable_reinforce.*loss_fn=importance_sampling.*cispo"):
        losses.loss_function("stable_reinforce")


# ----- the wire format ----------------------------------------------------------------------------------------------
def _datum(tokens: list[int], adv: float) -> tinker.Datum:
    n = len(tokens) - 1
    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tinker.TensorData.from_torch(torch.tensor(tokens[1:])),
            "logprobs": tinker.TensorData.from_torch(torch.linspace(-1, -0.1, n)),
            "advantages": tinker.TensorData.from_torch(torch.tensor([0.0] * (n - 2) + [adv, adv])),
        },
    )


def test_a_forward_backward_request_encoded_by_the_sdk_decodes_to_the_same_datums() -> None:
    data = [_datum([5, 6, 7, 8, 9], 0.5), _datum([1, 2, 3], -1.0)]
    prompt, sampled = tinker.PromptProvenanceSpan, tinker.SampledProvenanceSpan
    spans_in = [prompt(sequence_id="s0", offset=0, length=1), sampled(sequence_id="s0", length=1)]
    spans_out = [prompt(sequence_id="s0", offset=1, length=1), sampled(sequence_id="s0", length=1)]
    data[1] = data[1].with_provenance(model_input=spans_in, loss_fn_inputs=spans_out)
    request = types.ForwardBackwardRequest(
        types.ForwardBackwardInput(data, "ppo", {"clip_low_threshold": 0.7, "note": "x"}),
        model_id="m:train:0",
        seq_id=3,
    )
    body = forward_backward_request_to_proto(request).SerializeToString()
    got = wire.decode_forward_backward(body)
    assert (got.model_id, got.seq_id, got.loss_fn, got.forward_only) == ("m:train:0", 3, "ppo", False)
    assert got.config == {"clip_low_threshold": pytest.approx(0.7), "note": "x"}
    for sent, back in zip(data, got.datums, strict=True):
        assert back.model_input.to_ints() == sent.model_input.to_ints()
        for name, td in sent.loss_fn_inputs.items():
            np.testing.assert_array_equal(back.loss_fn_inputs[name].to_numpy(), td.to_numpy())
    assert got.datums[0].loss_fn_input_spans is None
    kinds = [type(s).__name__ for s in got.datums[1].loss_fn_input_spans]
    assert kinds == ["PromptProvenanceSpan", "SampledProvenanceSpan"]


def test_sparse_csr_tensors_decode_dense() -> None:
    tensor = pb.Tensor(dtype=pb.DTYPE_FLOAT32, shape=[2, 3])
    tensor.sparse_csr.values = np.asarray([1.0, 2.0, 3.0], np.float32).tobytes()
    tensor.sparse_csr.crow_indices = np.asarray([0, 1, 3], np.int64).tobytes()
    tensor.sparse_csr.col_indices = np.asarray([2, 0, 1], np.int64).tobytes()
    np.testing.assert_array_equal(wire.dense(tensor), [[0, 0, 1], [2, 3, 0]])


def test_results_encoded_here_decode_with_the_sdk() -> None:
    seqs = [wire.Sampled([4, 5, 9], [-0.5, -0.25, -1.0], "stop"), wire.Sampled([7], [-2.0], "length")]
    response = deserialize_sample_response(wire.sample_response(seqs, [float("nan"), -1.5, -0.5]))
    assert [s.tokens for s in response.sequences] == [[4, 5, 9], [7]]
    assert [s.stop_reason for s in response.sequences] == ["stop", "length"]
    assert response.sequences[0].logprobs == pytest.approx([-0.5, -0.25, -1.0])
    first = response.prompt_logprobs[0]  # position 0 has no logprob: NaN on the wire, None for the SDK's caller
    assert (first is None or math.isnan(first)) and response.prompt_logprobs[1:] == pytest.approx([-1.5, -0.5])
    out = deserialize_forward_backward_output(
        wire.forward_backward_output([np.asarray([-1.0, -2.0]), np.asarray([-3.0])], {"loss:sum": 4.5})
    )
    assert [o["logprobs"].tolist() for o in out.loss_fn_outputs] == [[-1.0, -2.0], [-3.0]]
    assert out.metrics == {"loss:sum": 4.5}


# ----- sampling ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_model(tiny: Any) -> tuple[Any, Any, list[int]]:
    from rl_guards.tinker.backend.trainer import load_model

    tok = tiny.load_tokenizer()
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is 3+4? Answer with the number."}],
        add_generation_prompt=True,
        tokenize=True,
        enable_thinking=False,
    )
    ids = prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt
    return load_model(tiny.model_dir).eval(), tok, [int(t) for t in ids]


def _rows(prompt: list[int], stop: Any, eos: int, n: int = 6, max_tokens: int = 12) -> list[sampler.Row]:
    rule = sampler.StopRule.of(stop, eos)
    return [sampler.Row(prompt, max_tokens, stop=rule, seed=s) for s in range(n)]


def test_stop_token_is_kept_and_named_stop(tiny_model: Any) -> None:
    model, tok, prompt = tiny_model
    eos = tok.eos_token_id
    out = sampler.sample_rows(model, _rows(prompt, [eos], eos), tok.decode)
    stopped = [s for s in out if s.stop_reason == "stop"]
    assert stopped, "the tiny model ends some answers"
    assert all(s.tokens[-1] == eos and eos not in s.tokens[:-1] for s in stopped)
    assert all(len(s.tokens) == 12 and eos not in s.tokens for s in out if s.stop_reason == "length")
    implicit = sampler.sample_rows(model, _rows(prompt, None, eos), tok.decode)
    assert [s.tokens for s in implicit] == [s.tokens for s in out]  # None: the tokenizer's EOS


def test_an_empty_stop_list_runs_to_max_tokens_and_strings_stop_on_the_text(tiny_model: Any) -> None:
    model, tok, prompt = tiny_model
    eos = tok.eos_token_id
    out = sampler.sample_rows(model, _rows(prompt, [], eos, max_tokens=5), tok.decode)
    assert all(len(s.tokens) == 5 and s.stop_reason == "length" for s in out)
    free = sampler.sample_rows(model, _rows(prompt, [], eos, max_tokens=8), tok.decode)
    piece = tok.decode(free[0].tokens[:2])
    cut = sampler.sample_rows(model, _rows(prompt, [piece], eos, max_tokens=8)[:1], tok.decode)[0]
    assert cut.stop_reason == "stop" and piece in tok.decode(cut.tokens) and piece not in tok.decode(cut.tokens[:-1])


def test_rows_of_one_length_batched_sample_as_alone(tiny_model: Any) -> None:
    model, tok, prompt = tiny_model
    rows = _rows(prompt, [tok.eos_token_id], tok.eos_token_id, n=4)
    together = sampler.sample_rows(model, rows, tok.decode)
    alone = [sampler.sample_rows(model, [r], tok.decode)[0] for r in rows]
    assert [s.tokens for s in together] == [s.tokens for s in alone]
    for a, b in zip(together, alone, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


# ----- the SDK end to end ---------------------------------------------------------------------------------------------
def _trained(local: Any, training: Any) -> Any:
    """The backend's model behind a training client (the SDK creates it on the first request that needs it)."""
    training.get_info()
    (trained,) = local.service._trained.values()
    return trained


def _params(model: Any) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).clone()


def test_the_sdk_trains_samples_and_reads_logprobs_that_match(
    local: Any, tiny: Any, request: pytest.FixtureRequest
) -> None:
    tok = tiny.load_tokenizer()
    messages = [{"role": "user", "content": "Repeat the word: apple"}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    prompt_ids = tok(prompt)["input_ids"]
    service = tinker.ServiceClient(base_url=local.url)
    request.addfinalizer(lambda: service.__exit__(None, None, None))  # the session ends as the cookbook's do
    training = service.create_lora_training_client(base_model=tiny.model_dir, rank=8)
    trained = _trained(local, training)
    before = _params(trained.model)
    sampling = training.save_weights_and_get_sampling_client()
    params = types.SamplingParams(max_tokens=8, stop=[tok.eos_token_id], seed=3)
    model_input = tinker.ModelInput.from_ints(prompt_ids)
    result = sampling.sample(prompt=model_input, num_samples=2, sampling_params=params).result()
    again = sampling.sample(prompt=model_input, num_samples=2, sampling_params=params).result()
    assert [s.tokens for s in result.sequences] == [s.tokens for s in again.sequences]  # seeded
    seq = result.sequences[0]
    tokens = prompt_ids + list(seq.tokens)
    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tinker.TensorData.from_torch(torch.tensor(tokens[1:])),
            "logprobs": tinker.TensorData.from_torch(torch.tensor([0.0] * (len(prompt_ids) - 1) + list(seq.logprobs))),
            "advantages": tinker.TensorData.from_torch(
                torch.tensor([0.0] * (len(prompt_ids) - 1) + [1.0] * len(seq.tokens))
            ),
        },
    )
    forward = training.forward([datum], "importance_sampling").result()
    trained_lp = forward.loss_fn_outputs[0]["logprobs"].tolist()[len(prompt_ids) - 1 :]
    assert trained_lp == pytest.approx(list(seq.logprobs), abs=1e-4)  # the sampler's logprobs are the trainer's
    assert torch.equal(before, _params(trained.model))  # forward only: nothing changed
    training.forward_backward([datum], "importance_sampling").result()
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert not torch.equal(before, _params(trained.model))  # weights actually changed
    saved = training.save_state("ckpt").result()
    assert saved.path.startswith("tinker://") and saved.path.endswith("/weights/ckpt")


def test_a_loss_it_does_not_have_and_a_vetoing_tap_fail_the_request_at_once(
    local: Any, tiny: Any, request: pytest.FixtureRequest
) -> None:
    service = tinker.ServiceClient(base_url=local.url)
    request.addfinalizer(lambda: service.__exit__(None, None, None))  # the session ends as the cookbook's do
    training = service.create_lora_training_client(base_model=tiny.model_dir, rank=8)
    trained = _trained(local, training)
    datum = _datum([5, 6, 7, 8, 9], 1.0)
    start = time.monotonic()
    with pytest.raises(tinker.RequestFailedError, match="does not implement loss_fn='stable_reinforce'"):
        training.forward_backward([datum], "stable_reinforce").result()
    assert time.monotonic() - start < 30  # a user error, not minutes of retries

    def veto(event: Any) -> None:
        if event.name == "forward_backward":
            raise ValueError(f"vetoed {len(event.data['datums'])} datums")

    local.taps.append(veto)
    before = _params(trained.model)
    with pytest.raises(tinker.RequestFailedError, match="vetoed 1 datums"):
        training.forward_backward([datum], "importance_sampling").result()
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert torch.equal(before, _params(trained.model))  # the vetoed step never trained


@pytest.mark.slow
def test_the_backend_serves_from_its_own_process_by_model_name(tiny: Any, tmp_path: Any) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "TINKER_TELEMETRY": "0"}
    process = subprocess.Popen(
        [sys.executable, "-m", "rl_guards.tinker.backend", "--model", f"tiny/qwen3={tiny.model_dir}",
         "--root", str(tmp_path / "root")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), process.stderr.read()
        with tinker.ServiceClient(base_url=url) as service:
            training = service.create_lora_training_client(base_model="tiny/qwen3", rank=8)
            info = training.get_info()
            assert info.model_data.model_name == "tiny/qwen3" and info.model_data.tokenizer_id == tiny.model_dir
            assert training.save_state("first").result().path.endswith("/weights/first")
        assert (tmp_path / "root").is_dir() and list((tmp_path / "root").rglob("state.pt"))
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0
