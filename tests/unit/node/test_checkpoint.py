"""Atomic checkpoints: round-trip of weights, optimizer and RNG; partial writes never load."""

from __future__ import annotations

import copy
import random

import torch

from node.books import checkpoint
from node.models.config import LoraSpec, ModelConfig
from node.models.load import load_model


def _step(model, opt):
    loss = sum(p.float().pow(2).sum() for p in model.parameters() if p.requires_grad)
    loss.backward()
    opt.step()
    opt.zero_grad()


def test_full_model_round_trip(tmp_path, tiny_qwen):
    lm = copy.deepcopy(tiny_qwen)
    opt = torch.optim.AdamW(lm.model.parameters(), lr=1e-2)
    _step(lm.model, opt)
    random.seed(5)
    torch.manual_seed(5)
    checkpoint.save(tmp_path, model=lm.model, tokenizer=lm.tokenizer, optimizer=opt, round_=3, policy_version=4)
    expect_py, expect_torch = random.random(), torch.rand(3)

    fresh = copy.deepcopy(tiny_qwen)
    opt2 = torch.optim.AdamW(fresh.model.parameters(), lr=1e-2)
    restored = checkpoint.restore(tmp_path, model=fresh.model, optimizer=opt2)
    assert (restored.round, restored.policy_version) == (3, 4)
    for a, b in zip(lm.model.state_dict().values(), fresh.model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert opt2.state_dict()["state"][0]["step"] == 1
    assert (random.random(), torch.rand(3).tolist()) == (expect_py, expect_torch.tolist())
    # the full-model checkpoint is a plain HF model dir
    assert (tmp_path / "round-00000003" / "model" / "config.json").is_file()


def test_lora_checkpoint_is_a_standard_peft_adapter(tmp_path, tiny_qwen):
    from peft import PeftModel

    lm = load_model(ModelConfig(spec="tiny-qwen2", lora=LoraSpec(r=4, alpha=8)))
    opt = torch.optim.AdamW([p for p in lm.model.parameters() if p.requires_grad], lr=1e-2)
    _step(lm.model, opt)
    path = checkpoint.save(tmp_path, model=lm.model, tokenizer=lm.tokenizer, optimizer=opt, round_=0, policy_version=1)
    loaded = PeftModel.from_pretrained(copy.deepcopy(tiny_qwen.model), path / "adapter")
    trained = {k: v for k, v in lm.model.state_dict().items() if "lora_" in k}
    again = {k: v for k, v in loaded.state_dict().items() if "lora_" in k}
    assert trained.keys() == again.keys() and len(trained) > 0
    for k in trained:
        torch.testing.assert_close(trained[k], again[k], rtol=0, atol=0)


def test_partial_writes_are_ignored_and_cleaned(tmp_path, tiny_qwen):
    lm = copy.deepcopy(tiny_qwen)
    opt = torch.optim.AdamW(lm.model.parameters(), lr=1e-2)
    for r in range(4):
        checkpoint.save(tmp_path, model=lm.model, tokenizer=lm.tokenizer, optimizer=opt, round_=r,
                        policy_version=r, keep=2)
    assert [p.name for p in checkpoint.complete_checkpoints(tmp_path)] == ["round-00000002", "round-00000003"]
    # a writer killed mid-way leaves a temp dir (and possibly a dir without state.json)
    (tmp_path / ".tmp-00000004-999").mkdir()
    (tmp_path / ".tmp-00000004-999" / "optimizer.pt").write_bytes(b"\x00garbage")
    restored = checkpoint.restore(tmp_path, model=lm.model, optimizer=opt)
    assert restored.round == 3
    assert not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())


def test_no_checkpoint_means_fresh_start(tmp_path, tiny_qwen):
    lm = copy.deepcopy(tiny_qwen)
    assert checkpoint.restore(tmp_path / "none", model=lm.model, optimizer=torch.optim.SGD(lm.model.parameters(), lr=0.1)) is None


def test_a_checkpoint_written_on_a_gpu_resumes_on_a_cpu(tmp_path, tiny_qwen):
    """optimizer.pt saved with CUDA storage tags (as on a GPU machine) loads here, onto the CPU."""
    lm = copy.deepcopy(tiny_qwen)
    opt = torch.optim.AdamW(lm.model.parameters(), lr=1e-2)
    _step(lm.model, opt)
    registry = torch.serialization._package_registry

    def as_cuda(storage):  # tag every storage as torch.save does for one on cuda:0
        return "cuda:0"

    registry.insert(0, (-1, as_cuda, lambda obj, location: None))
    try:
        checkpoint.save(tmp_path, model=lm.model, tokenizer=lm.tokenizer, optimizer=opt, round_=1, policy_version=2)
    finally:
        registry[:] = [p for p in registry if p[1] is not as_cuda]
    fresh = copy.deepcopy(tiny_qwen)
    opt2 = torch.optim.AdamW(fresh.model.parameters(), lr=1e-2)
    restored = checkpoint.restore(tmp_path, model=fresh.model, optimizer=opt2)
    assert (restored.round, restored.policy_version) == (1, 2)
    state = opt2.state_dict()["state"][0]
    assert state["exp_avg"].device.type == "cpu" and torch.equal(state["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
