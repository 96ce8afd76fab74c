"""`swarm export`: a run's newest checkpoint loads with transformers / peft and generates the trained model's tokens."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from node.books import checkpoint
from node.models.config import LoraSpec, ModelConfig
from node.models.load import load_model
from ops.cli.main import main


def _train_a_little(model) -> None:
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=5e-2)
    ids = torch.tensor([[1, 5, 9, 13, 17, 21]])
    for _ in range(3):
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    return opt


def _run_dir(tmp_path, lm, rounds=(0, 1)):
    opt = _train_a_little(lm.model)
    for r in rounds:  # the newest one is exported
        checkpoint.save(tmp_path / "run" / "checkpoints", model=lm.model, tokenizer=lm.tokenizer, optimizer=opt,
                        round_=r, policy_version=r + 1, extra={"model_spec": "tiny-qwen2"})
    return tmp_path / "run"


def _logits(model, tokenizer) -> torch.Tensor:
    ids = tokenizer("State the final answer: 1 + 2 =", return_tensors="pt").input_ids
    with torch.no_grad():
        return model(input_ids=ids).logits


def _generates(model, tokenizer) -> None:
    ids = tokenizer("1 + 2 =", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] == ids.shape[1] + 4


def test_full_model_export_loads_with_transformers(tmp_path, tiny_qwen, capsys):
    lm = copy.deepcopy(tiny_qwen)
    run = _run_dir(tmp_path, lm)
    assert main(["export", str(run), "--out", str(tmp_path / "out")]) == 0
    assert "full model, round 1" in capsys.readouterr().out
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out", local_files_only=True)
    tok = AutoTokenizer.from_pretrained(tmp_path / "out", local_files_only=True)
    torch.testing.assert_close(_logits(model, tok), _logits(lm.model.eval(), lm.tokenizer))
    _generates(model, tok)
    manifest = json.loads((tmp_path / "out" / "rlswarm-export.json").read_text())
    assert (manifest["kind"], manifest["round"], manifest["policy_version"]) == ("full", 1, 2)


def test_lora_export_loads_with_peft_and_merged_with_transformers(tmp_path, capsys):
    from peft import AutoPeftModelForCausalLM, PeftModel

    lm = load_model(ModelConfig(spec="tiny-qwen2", lora=LoraSpec(r=4)))
    run = _run_dir(tmp_path, lm)
    expected = _logits(lm.model.eval(), lm.tokenizer)
    base_only = _logits(AutoModelForCausalLM.from_pretrained(lm.model.peft_config["default"].base_model_name_or_path),
                        lm.tokenizer)
    assert not torch.allclose(expected, base_only)  # the adapter changed the model

    assert main(["export", str(run), "--out", str(tmp_path / "adapter")]) == 0
    cfg = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    base = AutoModelForCausalLM.from_pretrained(cfg["base_model_name_or_path"], local_files_only=True)
    tok = AutoTokenizer.from_pretrained(tmp_path / "adapter", local_files_only=True)
    peft_model = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    torch.testing.assert_close(_logits(peft_model, tok), expected)
    auto = AutoPeftModelForCausalLM.from_pretrained(tmp_path / "adapter").eval()  # base found from the config alone
    torch.testing.assert_close(_logits(auto, tok), expected)
    _generates(peft_model, tok)

    assert main(["export", str(run), "--out", str(tmp_path / "merged"), "--merge"]) == 0
    assert "merged model on" in capsys.readouterr().out
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", local_files_only=True)
    torch.testing.assert_close(_logits(merged, tok), expected, rtol=1e-4, atol=1e-4)
    _generates(merged, AutoTokenizer.from_pretrained(tmp_path / "merged", local_files_only=True))


def test_user_errors_are_one_line_and_exit_2(tmp_path, tiny_qwen, capsys):
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no checkpoint in" in capsys.readouterr().err
    run = _run_dir(tmp_path, copy.deepcopy(tiny_qwen), rounds=(0,))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert main(["export", str(run), "--out", str(tmp_path / "full")]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "o")]) == 2  # a `swarm local --out` dir
    assert f"export one of: {run}" in capsys.readouterr().err and not (tmp_path / "o").exists()


@pytest.fixture(autouse=True)
def _quiet_hf():
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
