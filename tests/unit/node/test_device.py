"""Device and precision (node/models/device.py): train and score on cpu in bf16 and fp16, the loss scale,
gradient checkpointing, tensors created on the model's device, and cuda refused where torch sees none."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from losses import build_loss
from node.config import ConfigError, parse_config
from node.generation.config import GenerationConfig
from node.generation.hf import HFGenerator
from node.generation.hf_generate import HFGenerateGenerator
from node.models import device as dev
from node.models.config import ModelConfig, PlacementConfig
from node.models.load import load_model
from node.round.config import TrainConfig
from node.round.logprobs import TokenRow, score_rows
from node.round.train import Row, build_optimizer, loss_inputs, train_step
from node.tasks.source import render_prompt

QUESTIONS = ["What is 2 + 3?", "Spell this word backward: banana"]


def _rows(lm, n=4, seed=0, temperature=1.0):
    """Completions sampled by the model itself: prompts, rows with their sampling logprobs."""
    torch.manual_seed(seed)
    gen = HFGenerator(lm.model, lm.tokenizer, GenerationConfig(temperature=temperature, max_new_tokens=10))
    prompts = [render_prompt(lm.tokenizer, q, None) for q in QUESTIONS]
    res = gen.generate(prompts, n=n)
    rows = []
    for gid, (p, group) in enumerate(zip(prompts, res.groups)):
        ids = lm.tokenizer(p, add_special_tokens=False)["input_ids"]
        for j, c in enumerate(group):
            rows.append(Row(TokenRow(ids, list(c.token_ids)), list(c.logprobs), sum(c.logprobs), True,
                            1.0 if j % 2 else -1.0, gid, False))
    return rows


def _fresh(tiny_qwen):
    return SimpleNamespace(model=copy.deepcopy(tiny_qwen.model), tokenizer=tiny_qwen.tokenizer)


def test_resolve_device_on_this_cpu_machine(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert dev.resolve_device("auto") == torch.device("cpu")
    assert dev.resolve_device("cpu") == torch.device("cpu")
    for spec in ("cuda", "cuda:1"):
        with pytest.raises(dev.DeviceUnavailable) as exc:
            dev.resolve_device(spec)
        assert "\n" not in str(exc.value) and "torch sees no CUDA device" in str(exc.value)


def test_resolve_device_counts_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert dev.resolve_device("auto") == torch.device("cuda:0")
    assert dev.resolve_device("cuda") == torch.device("cuda:0")
    with pytest.raises(dev.DeviceUnavailable, match="sees 1 CUDA device"):
        dev.resolve_device("cuda:1")


def test_placement_config_validation():
    assert PlacementConfig().device == "auto"
    for bad in ("gpu", "cuda:x", "cuda0", "tpu"):
        with pytest.raises(ValueError):
            TrainConfig(device=bad)
    with pytest.raises(ValueError, match="needs model.lora"):
        ModelConfig(spec="x", dtype="float16")
    assert ModelConfig(spec="x", dtype="float16", lora={"r": 4}).dtype == "float16"
    base = {"model": {"spec": "tiny-qwen2", "lora": {"r": 4}}, "tasks": {"datasets": [{"name": "chain_sum"}]},
            "federated": {}}
    with pytest.raises(ConfigError, match="float16 is not available in federated mode"):
        parse_config({**base, "train": {"autocast": "float16"}})
    assert parse_config({**base, "train": {"autocast": "bfloat16"}}).train.autocast == "bfloat16"


@pytest.mark.parametrize("autocast", ["bfloat16", "float16"])
def test_autocast_runs_forward_passes_in_low_precision_with_float32_weights(tiny_qwen, autocast):
    lm = _fresh(tiny_qwen)
    precision = dev.place(lm.model, TrainConfig(device="cpu", autocast=autocast))
    want = getattr(torch, autocast)
    seen = []
    handle = lm.model.lm_head.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    rows = _rows(lm)  # generation under autocast
    assert seen and set(seen) == {want}
    seen.clear()
    with torch.no_grad():
        logp, _ = score_rows(lm.model, [r.tokens for r in rows], 1.0, lm.tokenizer.pad_token_id)
    handle.remove()
    assert set(seen) == {want} and logp.dtype == torch.float32
    # generation and scoring in the same precision: on-policy log-ratios stay near 0
    for i, r in enumerate(rows):
        n = len(r.logp_beh)
        assert (logp[i, :n] - torch.tensor(r.logp_beh)).abs().max() < 0.1
    assert {p.dtype for p in lm.model.parameters()} == {torch.float32}
    assert "autocast " + autocast in dev.describe(lm.model, precision)


@pytest.mark.parametrize("setup", [{"model_dtype": "bfloat16"}, {"autocast": "bfloat16"}, {"autocast": "float16"}],
                         ids=["bf16-weights", "bf16-autocast", "fp16-autocast"])
def test_train_and_score_on_cpu_in_low_precision(tiny_qwen, setup):
    lm = _fresh(tiny_qwen)
    if "model_dtype" in setup:
        lm.model.to(torch.bfloat16)
    cfg = TrainConfig(device="cpu", autocast=setup.get("autocast"), lr=1e-2, micro_batch_rows=4)
    precision = dev.place(lm.model, cfg)
    opt = build_optimizer(lm.model, cfg)
    precision.attach(opt)
    rows = _rows(lm)
    before = [p.detach().clone() for p in lm.model.parameters()]
    step = train_step(lm.model, opt, rows, build_loss("grpo"), cfg, temperature=1.0,
                      pad_id=lm.tokenizer.pad_token_id)
    assert step.stepped and torch.isfinite(torch.tensor(step.metrics.loss))
    assert 0 < step.metrics.grad_norm < float("inf")
    assert any(not torch.equal(b, p) for b, p in zip(before, lm.model.parameters()))
    assert precision.skipped_steps == 0


def test_float16_loss_scale_unscales_gradients_and_skips_overflow(tiny_qwen):
    lm = _fresh(tiny_qwen)
    cfg = TrainConfig(device="cpu", autocast="float16", lr=1e-2)
    precision = dev.place(lm.model, cfg)
    rows = _rows(lm)
    pad = lm.tokenizer.pad_token_id

    def grads(scale: float) -> list[torch.Tensor]:
        precision.scale = scale
        lm.model.zero_grad(set_to_none=True)
        build_loss("grpo")(loss_inputs(lm.model, rows, 1.0, pad)).loss.backward()
        return [p.grad.clone() for p in lm.model.parameters()]

    def rel(a, b):
        return max(float((x - y).norm() / y.norm()) for x, y in zip(a, b) if y.norm() > 0)

    scaled, rescaled = grads(1024.0), grads(8192.0)
    assert rel(scaled, rescaled) < 1e-2  # the scale never shows in .grad
    precision.dtype = None  # the same gradients in float32: the scaled float16 ones stay close
    reference = grads(1.0)
    precision.dtype = torch.float16
    assert rel(scaled, reference) < 0.05
    opt = build_optimizer(lm.model, cfg)
    precision.attach(opt)
    precision.scale = 2.0**60  # float16 overflows: the step is skipped and the scale halved
    before = [p.detach().clone() for p in lm.model.parameters()]
    step = train_step(lm.model, opt, rows, build_loss("grpo"), cfg, temperature=1.0, pad_id=pad)
    assert precision.skipped_steps == 1 and precision.scale == 2.0**59
    assert step.metrics.grad_norm != step.metrics.grad_norm or step.metrics.grad_norm == float("inf")
    assert all(torch.equal(b, p) for b, p in zip(before, lm.model.parameters()))


def test_gradient_checkpointing_gives_the_same_gradients(tiny_qwen):
    rows = _rows(_fresh(tiny_qwen))
    out = []
    for ckpt in (False, True):
        lm = _fresh(tiny_qwen)
        dev.place(lm.model, TrainConfig(device="cpu", gradient_checkpointing=ckpt))
        assert dev.checkpointing(lm.model) is ckpt
        lm.model.train()
        build_loss("grpo")(loss_inputs(lm.model, rows, 1.0, lm.tokenizer.pad_token_id)).loss.backward()
        out.append([p.grad for p in lm.model.parameters()])
    for a, b in zip(*out):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_autocast_survives_lora_and_deepcopy():
    lm = load_model(ModelConfig(spec="tiny-qwen2", lora={"r": 4}))
    dev.place(lm.model, TrainConfig(device="cpu", autocast="bfloat16"))
    clone = copy.deepcopy(lm.model)
    seen = []
    base = clone.get_base_model()
    base.lm_head.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    ids = torch.tensor([[1, 2, 3]])
    clone(input_ids=ids)
    assert seen == [torch.bfloat16]  # the copy's own forward, under autocast
    assert base.forward.__self__ is base


class _MetaBody(torch.nn.Module):
    def forward(self, input_ids, attention_mask):
        assert input_ids.device.type == "meta" and attention_mask.device.type == "meta"
        return SimpleNamespace(last_hidden_state=input_ids.unsqueeze(-1).float().expand(-1, -1, 4))


class _MetaModel(torch.nn.Module):
    """A stand-in policy on the `meta` device: shapes without data, so every tensor the round builds for it
    must be created on the model's device (as on a GPU) or combining them fails. Scored through its body
    and output head (node.round.logprobs), as a transformers model is."""

    def __init__(self, vocab: int = 32):
        super().__init__()
        self.body = _MetaBody()
        self.head = torch.nn.Linear(4, vocab, bias=False, device="meta")

    def get_decoder(self):
        return self.body

    def get_output_embeddings(self):
        return self.head

    def generate(self, input_ids, attention_mask, **_):
        raise _Generated(input_ids.device, attention_mask.device)


class _Generated(Exception):
    pass


def test_round_tensors_are_created_on_the_models_device():
    rows = [Row(TokenRow([1, 2, 3], [4, 5]), [-1.0, -2.0], -3.0, True, 0.5, 0, False),
            Row(TokenRow([1, 2], [4, 5, 6]), [0.0] * 3, -3.0, False, -0.5, 0, True)]
    inputs = loss_inputs(_MetaModel(), rows, 1.0, 0)
    tensors = {k: v for k, v in vars(inputs).items() if isinstance(v, torch.Tensor)}
    assert {"logp", "mask", "advantages", "group_ids", "logp_beh_seq"} <= tensors.keys()
    assert {k: v.device.type for k, v in tensors.items()} == {k: "meta" for k in tensors}


def test_hf_generate_feeds_the_model_on_its_device(tiny_qwen):
    gen = HFGenerateGenerator(_MetaModel(), tiny_qwen.tokenizer, GenerationConfig())
    with pytest.raises(_Generated) as exc:
        gen.generate(["What is 2 + 3?"], n=2)
    assert {d.type for d in exc.value.args} == {"meta"}


def test_the_greedy_reference_feeds_the_model_on_its_device(tiny_qwen):
    """tests/gpu's greedy-equals-generate check runs this helper on a CUDA model: its inputs go to the model's
    device (only transformers ≥ 5.x moved CPU inputs to a CUDA model by itself)."""
    from tests.unit.node.test_decode_loop import _greedy_generate

    lm = SimpleNamespace(model=_MetaModel(), tokenizer=tiny_qwen.tokenizer)
    with pytest.raises(_Generated) as exc:
        _greedy_generate(lm, ["What is 2 + 3?", "Hi"], 4)
    assert {d.type for d in exc.value.args} == {"meta"}


def test_bfloat16_full_fine_tuning_at_a_small_lr_loses_most_updates_and_the_node_says_so(tiny_qwen):
    """One AdamW step (each weight moves by about lr) on bfloat16 weights: at lr 1e-5 most weights do not change
    at all (15 % of tiny-qwen2's did, 2 % at 1e-6), in float32 every one does; node.config.precision_note warns
    of exactly that setup."""
    from node.config import parse_config, precision_note

    changed = {}
    for dtype, lr in ((torch.bfloat16, 1e-5), (torch.bfloat16, 1e-6), (torch.float32, 1e-6)):
        model = copy.deepcopy(tiny_qwen.model).to(dtype)
        before = [p.detach().clone() for p in model.parameters()]
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        torch.optim.AdamW(list(model.parameters()), lr=lr, weight_decay=0.0).step()
        moved = sum(int((p.detach() != b).sum()) for p, b in zip(model.parameters(), before))
        changed[(dtype, lr)] = moved / sum(b.numel() for b in before)
    assert changed[(torch.bfloat16, 1e-5)] < 0.5 and changed[(torch.bfloat16, 1e-6)] < 0.1, changed
    assert changed[(torch.float32, 1e-6)] > 0.99
    base = {"model": {"spec": "tiny-qwen2", "dtype": "bfloat16"}, "tasks": {"datasets": [{"name": "chain_sum"}]}}
    assert "most AdamW updates" in precision_note(parse_config({**base, "train": {"lr": 1e-5}}))
    assert precision_note(parse_config({**base, "train": {"lr": 1e-4}})) is None
    assert precision_note(parse_config({**base, "model": {**base["model"], "lora": {"r": 8}}})) is None
    assert precision_note(parse_config({**base, "model": {"spec": "tiny-qwen2"}})) is None  # float32
