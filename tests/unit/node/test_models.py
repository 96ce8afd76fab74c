"""node.models.load / node.models.builders: specs, the built-in cache, tiny models, LoRA, fingerprints.

The two tiny models are built once per session into a temporary cache (≈ 5 s); nothing here
touches the network (HF_HUB_OFFLINE=1 for the whole module).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from node.models import builders as model_builders
from node.models.config import LoraSpec, ModelConfig
from node.models.load import (
    BUILTIN_MODELS,
    LoadedModel,
    ModelNotFound,
    default_cache_dir,
    fetch,
    load_model,
    resolve_model_dir,
    tokenizer_fingerprint,
)

TINY = ["tiny-qwen2", "tiny-llama"]


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # an empty HF cache


@pytest.fixture(scope="session")
def cache(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("model-cache")
    for alias in TINY:
        fetch(alias, cache_dir=root, progress=lambda _msg: None)
    return root


def _load(cache: Path, spec: str = "tiny-qwen2", **kw) -> LoadedModel:
    return load_model(ModelConfig(spec=spec, **kw), cache_dir=cache)


# -- specs --------------------------------------------------------------------------------------


def test_local_directory_resolves_to_itself(cache):
    local = resolve_model_dir("tiny-llama", cache_dir=cache)
    assert resolve_model_dir(str(local)) == local
    loaded = _load(cache, str(local))
    assert loaded.name == str(local) and loaded.vocab_size == 384


def test_unknown_alias_error_lists_every_builtin(cache):
    with pytest.raises(ModelNotFound) as err:
        resolve_model_dir("tiny-gpt9", cache_dir=cache)
    assert isinstance(err.value, ValueError)
    for alias in BUILTIN_MODELS:
        assert alias in str(err.value)


@pytest.mark.parametrize("spec", ["./no/such/dir", "/no/such/dir", "~/no-such-dir"])
def test_missing_local_path_is_not_taken_for_a_hub_id(spec, cache):
    with pytest.raises(ModelNotFound, match="not a local directory"):
        resolve_model_dir(spec, cache_dir=cache)


def test_offline_hub_id_fails_clearly_without_network(cache):
    with pytest.raises(ModelNotFound, match="HF_HUB_OFFLINE"):
        resolve_model_dir("no-such-org/no-such-model", cache_dir=cache)


def test_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(ModelNotFound, match="config.json"):
        load_model(ModelConfig(spec=str(tmp_path)))


def test_config_validation():
    with pytest.raises(ValueError):
        ModelConfig(spec="tiny-qwen2", colour="red")  # extra="forbid"
    with pytest.raises(ValueError):
        LoraSpec(r=0)
    with pytest.raises(ValueError):
        ModelConfig(spec="tiny-qwen2", dtype="float16")
    assert ModelConfig(spec="x", lora={"r": 4}).lora.alpha == 16


def test_default_cache_dir_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SWARM_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("SWARM_CACHE_DIR")
    assert default_cache_dir() == Path.home() / ".cache" / "rlswarm"


# -- tiny models ----------------------------------------------------------------------------------


def test_tiny_build_is_deterministic(cache, tmp_path):
    first = resolve_model_dir("tiny-qwen2", cache_dir=cache)
    second = fetch("tiny-qwen2", cache_dir=tmp_path, progress=lambda _msg: None)
    assert first != second
    w1, w2 = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert w1.keys() == w2.keys()
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    assert (first / "tokenizer.json").read_bytes() == (second / "tokenizer.json").read_bytes()
    assert _load(cache).fingerprint == _load(tmp_path).fingerprint


def test_tiny_tokenizers_differ(cache):
    qwen, llama = _load(cache, "tiny-qwen2"), _load(cache, "tiny-llama")
    assert (qwen.vocab_size, llama.vocab_size) == (512, 384)
    assert (len(qwen.tokenizer), len(llama.tokenizer)) == (512, 384)
    assert qwen.fingerprint != llama.fingerprint
    text = "State the final answer to the following arithmetic problem: 47 + 385 ="
    assert qwen.tokenizer.encode(text) != llama.tokenizer.encode(text)


@pytest.mark.parametrize("alias", TINY)
def test_tiny_model_shape_and_head_dim(alias, cache):
    cfg = _load(cache, alias).model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    # 64 hidden / 2 heads = 32: the smallest head_dim vLLM accepts
    assert head_dim == 32 and cfg.num_hidden_layers == 2
    files = {p.name for p in resolve_model_dir(alias, cache_dir=cache).iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files


@pytest.mark.parametrize("alias", TINY)
def test_chat_template_and_special_tokens(alias, cache):
    tok = _load(cache, alias).tokenizer
    assert tok.padding_side == "left" and tok.pad_token == "<pad>" and tok.eos_token == "<|end|>"
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1 + 2 ="}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|system|>\nBe brief.<|end|>\n<|user|>\n1 + 2 =<|end|>\n<|assistant|>\n"
    no_gen = tok.apply_chat_template(messages[1:], tokenize=False, add_generation_prompt=False)
    assert no_gen == "<|user|>\n1 + 2 =<|end|>\n"
    ids = tok.encode(text, add_special_tokens=False)
    # each special is one token: ids 1..4 are <|system|> <|user|> <|assistant|> <|end|>
    assert ids[0] == 1 and ids[-2:] == [3, tok.encode("\n", add_special_tokens=False)[0]]
    assert ids.count(4) == 2
    assert tok.decode(ids, skip_special_tokens=True) == "\nBe brief.\n\n1 + 2 =\n\n"
    with pytest.raises(Exception, match="unsupported chat role"):
        tok.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


def test_tiny_model_generates_with_left_padding(cache):
    loaded = _load(cache, "tiny-llama")
    tok = loaded.tokenizer
    enc = tok(["1 + 2 =", "a much longer prompt about 3 + 4 ="], return_tensors="pt", padding=True)
    assert enc["attention_mask"][0, 0] == 0  # the shorter prompt is padded on the left
    torch.manual_seed(0)
    out = loaded.model.generate(**enc, max_new_tokens=5, do_sample=True, top_k=0)
    assert out.shape[0] == 2 and 1 <= out.shape[1] - enc["input_ids"].shape[1] <= 5


def test_a_tokenizer_that_declares_token_type_ids_hands_generate_none(cache, tmp_path):
    """transformers 4.x saves and loads a generic fast tokenizer with token_type_ids among its inputs; passed on
    to generate() they stop it ("model_kwargs are not used by the model"). Loading drops them."""
    import shutil

    folder = tmp_path / "tiny-qwen2-tt"
    shutil.copytree(resolve_model_dir("tiny-qwen2", cache_dir=cache), folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert "token_type_ids" in AutoTokenizer.from_pretrained(folder)(["1 + 2 ="])  # as transformers 4.x does
    loaded = load_model(ModelConfig(spec=str(folder)))
    enc = loaded.tokenizer(["1 + 2 =", "a longer prompt ="], return_tensors="pt", padding=True)
    assert set(enc) == {"input_ids", "attention_mask"}
    assert loaded.model.generate(**enc, max_new_tokens=3, do_sample=False).shape[0] == 2


def test_bfloat16_load(cache):
    model = _load(cache, dtype="bfloat16").model
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


# -- LoRA -------------------------------------------------------------------------------------------


def _adapter(loaded: LoadedModel) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in loaded.model.named_parameters() if "lora_" in k}


def test_lora_init_identical_across_loads(cache):
    rng_before = torch.random.get_rng_state()
    a = _adapter(_load(cache, lora=LoraSpec(r=4, init_seed=7)))
    b = _adapter(_load(cache, lora=LoraSpec(r=4, init_seed=7)))
    c = _adapter(_load(cache, lora=LoraSpec(r=4, init_seed=8)))
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # global RNG untouched
    # all-linear on 2 layers: q, k, v, o, gate, up, down = 7 modules × 2 layers × (A, B)
    assert len(a) == 7 * 2 * 2
    assert all(torch.equal(a[k], b[k]) for k in a)
    lora_a = [k for k in a if "lora_A" in k]
    assert all(not torch.equal(a[k], c[k]) for k in lora_a)
    assert all(torch.count_nonzero(v) == 0 for k, v in a.items() if "lora_B" in k)


def test_lora_only_adapters_trainable(cache):
    model = _load(cache, lora=LoraSpec(r=2, target_modules=["q_proj", "v_proj"])).model
    trainable = [k for k, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in k for k in trainable)
    assert len(trainable) == 2 * 2 * 2  # 2 modules × 2 layers × (A, B)


# -- fingerprints -----------------------------------------------------------------------------------


def test_fingerprint_ignores_runtime_padding_state(cache):
    tok = _load(cache).tokenizer
    before = tokenizer_fingerprint(tok)
    tok(["short", "a longer text"], padding=True, truncation=True, max_length=8)
    assert tokenizer_fingerprint(tok) == before


@pytest.mark.parametrize("alias", TINY)
def test_fingerprint_equal_for_equal_encoders(alias, cache):
    path = resolve_model_dir(alias, cache_dir=cache)
    auto, plain = AutoTokenizer.from_pretrained(path), PreTrainedTokenizerFast.from_pretrained(path)
    # qwen2: AutoTokenizer rebuilds a Qwen2Tokenizer from vocab + merges, the plain class reads
    # tokenizer.json as is; they encode identically, so the fingerprints must agree.
    text = "How many legs do 3 cats and 12 spiders have? <answer>108</answer>"
    assert auto.encode(text) == plain.encode(text)
    assert tokenizer_fingerprint(auto) == tokenizer_fingerprint(plain)
    assert len(tokenizer_fingerprint(auto)) == 64


def test_fingerprint_of_vocab_only_tokenizer_is_order_free():
    class VocabOnly:  # a slow tokenizer exposes only its vocabulary
        def __init__(self, vocab):
            self._vocab = vocab

        def get_vocab(self):
            return dict(self._vocab)

    a = VocabOnly({"a": 0, "b": 1, "ab": 2})
    b = VocabOnly({"ab": 2, "b": 1, "a": 0})
    c = VocabOnly({"a": 0, "b": 2, "ab": 1})
    assert tokenizer_fingerprint(a) == tokenizer_fingerprint(b) != tokenizer_fingerprint(c)


# -- cache ------------------------------------------------------------------------------------------


def _counting_builder(monkeypatch, name: str) -> list[Path]:
    calls: list[Path] = []
    real = getattr(model_builders, name)

    def counted(out_dir, progress):
        calls.append(out_dir)
        real(out_dir, progress)

    monkeypatch.setattr(model_builders, name, counted)
    return calls


def test_cached_build_is_reused(cache, monkeypatch):
    calls = _counting_builder(monkeypatch, "build_tiny_llama")
    path = resolve_model_dir("tiny-llama", cache_dir=cache)
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    start = time.perf_counter()
    assert resolve_model_dir("tiny-llama", cache_dir=cache) == path
    assert time.perf_counter() - start < 0.5 and calls == []
    assert (path / "model.safetensors").stat().st_mtime_ns == mtime
    info = json.loads((path / "builtin.json").read_text())
    assert info["alias"] == "tiny-llama" and info["build_seconds"] > 0


def test_interrupted_build_leaves_cache_usable(tmp_path, monkeypatch):
    calls = _counting_builder(monkeypatch, "build_tiny_llama")
    root = tmp_path / "models"
    root.mkdir()
    dead = root / ".tiny-llama-v1.tmp-999999999-deadbeef"  # no such pid: a crashed build
    dead.mkdir()
    (dead / "model.safetensors").write_bytes(b"truncated")
    live = root / f".tiny-llama-v1.tmp-{os.getpid()}-cafe0000"  # a build still running here
    live.mkdir()
    path = resolve_model_dir("tiny-llama", cache_dir=tmp_path)
    assert len(calls) == 1 and path == root / "tiny-llama-v1"
    assert not dead.exists() and live.exists()
    assert load_model(ModelConfig(spec="tiny-llama"), cache_dir=tmp_path).vocab_size == 384


def test_failed_build_publishes_nothing(tmp_path, monkeypatch):
    def crash(out_dir, progress):
        (out_dir / "config.json").write_text("{}")
        raise KeyboardInterrupt  # e.g. Ctrl-C half way

    monkeypatch.setattr(model_builders, "build_tiny_llama", crash)
    with pytest.raises(KeyboardInterrupt):
        resolve_model_dir("tiny-llama", cache_dir=tmp_path)
    assert list((tmp_path / "models").iterdir()) == []
    monkeypatch.undo()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert (resolve_model_dir("tiny-llama", cache_dir=tmp_path) / "model.safetensors").is_file()


def test_concurrent_build_loses_rename_gracefully(tmp_path, monkeypatch):
    real = model_builders.build_tiny_llama

    def racing(out_dir, progress):  # another process publishes while this one builds
        winner = out_dir.parent / "tiny-llama-v1"
        winner.mkdir()
        real(winner, progress)
        real(out_dir, progress)

    monkeypatch.setattr(model_builders, "build_tiny_llama", racing)
    path = resolve_model_dir("tiny-llama", cache_dir=tmp_path)
    assert path == tmp_path / "models" / "tiny-llama-v1"
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["tiny-llama-v1"]
