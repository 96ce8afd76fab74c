"""vLLM generation backend: whole GRPO rounds in one engine call, weights kept in step with training.

Same `Generator` protocol and logprob convention as the HF backend (docs/ARCHITECTURE.md §6): every completion
token carries log μ(y_t) = log_softmax(logits / T)[y_t]. vLLM reports that quantity with
`logprobs_mode="processed_logprobs"` (computed after the temperature, before sampling); the
default "raw_logprobs" is log_softmax(logits) without the temperature and would make every
on-policy ratio ≠ 1 at T ≠ 1. With top_p < 1 vLLM's processed logprobs are renormalised over the
nucleus, the HF backend's are not, so GenerationConfig refuses that combination.

DASH preemptive sampling: the round's B prompts × G samples go to vLLM in one `generate` call
(`SamplingParams(n=G)`), which schedules them as one continuous batch; training then
back-propagates in micro-batches (node/round/train.py).

Weight sync (after optimizer steps, every `vllm.sync_every` steps):
  - full fine-tuning: the training weights are written to `<policy dir>/model.safetensors` and
    vLLM reloads them in place (`collective_rpc("reload_weights", weights_path=…)`), then its
    prefix cache is dropped (cached KV blocks were computed by the old weights);
  - LoRA: vLLM holds the frozen base; each sync saves the adapter to a new directory and later
    generate calls name it with a new `LoRARequest` (a new id, so vLLM never reuses a stale one).
The version a result reports is the version of the weights vLLM sampled with, which lags the
node's version by up to sync_every − 1 steps.

Prompts are passed as token ids from our tokenizer (add_special_tokens=False, as the scorer
tokenises them), so vLLM sees exactly the prompt the scorer later conditions on.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from node.generation.base import GenerationResult
from node.generation.config import GenerationConfig
from protocols.records import Completion

log = logging.getLogger(__name__)

_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # vLLM accepts only these max_lora_rank values


def base_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights vLLM should hold, under HF names: the full model, or a peft model's frozen base.

    A tied output head is written out as its own tensor (a copy of the embedding) because the
    policy directory declares the model untied: vllm 0.32's in-place reload restores a tied
    `lm_head` to its *old* tensor ("ParallelLMHead: Failed to load weights"), leaving logits
    computed by stale weights. Untied, both tensors are reloaded from the file every sync.
    """
    is_peft = hasattr(model, "peft_config")
    base = model.get_base_model() if is_peft else model
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in base.state_dict().items():
        if is_peft:
            if "lora_" in name:
                continue
            name = name.replace(".base_layer.", ".")
        tensor = tensor.detach().to("cpu")
        if tensor.data_ptr() in seen:  # a tied alias: safetensors refuses shared storage
            tensor = tensor.clone()
        seen.add(tensor.data_ptr())
        out[name] = tensor.contiguous()
    if "lm_head.weight" not in out and "model.embed_tokens.weight" in out:
        out["lm_head.weight"] = out["model.embed_tokens.weight"].clone()
    return out


class VLLMGenerator:
    """vLLM `LLM` engine in this process, fed by the node's training model after each sync."""

    def __init__(self, model: torch.nn.Module, tokenizer, cfg: GenerationConfig, *,
                 work_dir: str | os.PathLike | None = None):
        from vllm import (
            LLM,  # the optional extra; imported only when this backend is chosen
        )

        self.cfg = cfg
        self.tokenizer = tokenizer
        self.lora = hasattr(model, "peft_config")
        self.policy_version = 0
        # how its steps run (node.generation.hf's decode_mode): vLLM captures its own CUDA graphs unless told not to
        self.decode_mode = ("vllm: eager (generation.vllm.enforce_eager)" if cfg.vllm.enforce_eager
                            else "vllm: its graphs")
        self._tmp = None if work_dir else tempfile.TemporaryDirectory(prefix="rlswarm-vllm-")
        self.work_dir = Path(work_dir or self._tmp.name)
        self.policy_dir = self.work_dir / "policy"
        self.policy_dir.mkdir(parents=True, exist_ok=True)
        self._write_policy_dir(model)
        self._lora_request = None
        opts = cfg.vllm
        dtype = opts.dtype if opts.dtype != "auto" else str(next(model.parameters()).dtype).removeprefix("torch.")
        kwargs = dict(
            model=str(self.policy_dir),
            tokenizer=str(self.policy_dir),
            dtype=dtype,
            seed=opts.seed,
            gpu_memory_utilization=opts.gpu_memory_utilization,
            max_num_seqs=opts.max_num_seqs,
            max_model_len=opts.max_model_len,
            enforce_eager=opts.enforce_eager,
            logprobs_mode="processed_logprobs",
            generation_config="vllm",  # the checkpoint's generation_config.json must not change sampling
        )
        if self.lora:
            rank = model.peft_config["default"].r
            kwargs.update(enable_lora=True, max_loras=1,
                          max_lora_rank=next(r for r in _LORA_RANKS if r >= rank))
        self.llm = LLM(**kwargs)
        if self.lora:
            self._push_adapter(model, 0)

    # -- weights -------------------------------------------------------------------------------
    def _write_policy_dir(self, model: torch.nn.Module) -> None:
        """config + tokenizer + base weights: the directory vLLM loads (and reloads) from."""
        base = model.get_base_model() if self.lora else model
        config = copy.deepcopy(base.config)
        config.tie_word_embeddings = False  # see base_state_dict
        config.save_pretrained(self.policy_dir)
        self.tokenizer.save_pretrained(self.policy_dir)
        self._write_weights(model)

    def _write_weights(self, model: torch.nn.Module) -> None:
        tmp = self.policy_dir / "model.safetensors.partial"  # not *.safetensors: never loaded half-written
        save_file(base_state_dict(model), str(tmp), metadata={"format": "pt"})
        os.replace(tmp, self.policy_dir / "model.safetensors")

    def _push_adapter(self, model: torch.nn.Module, version: int) -> None:
        from vllm.lora.request import LoRARequest

        path = self.work_dir / f"adapter-v{version}"
        model.save_pretrained(str(path))
        old = self._lora_request
        # lora_int_id must be > 0 and unique per adapter content: vLLM caches adapters by id.
        self._lora_request = LoRARequest(f"policy-v{version}", version + 1, str(path))
        if old is not None:
            shutil.rmtree(old.lora_path, ignore_errors=True)  # loaded lazily: only the current one is needed

    def sync_weights(self, model: torch.nn.Module, policy_version: int, *, force: bool = False) -> None:
        behind = policy_version - self.policy_version
        if not force and 0 <= behind < self.cfg.vllm.sync_every:
            return
        start = time.perf_counter()
        if self.lora:
            self._push_adapter(model, policy_version)
        else:
            self._write_weights(model)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(self.policy_dir)})
        self.llm.reset_prefix_cache()
        self.policy_version = policy_version
        log.info("vllm: weights v%d synced in %.2fs", policy_version, time.perf_counter() - start)

    # -- generation ----------------------------------------------------------------------------
    def generate(self, prompts: list[str], n: int, progress=None) -> GenerationResult:
        """One vLLM call for every prompt; `progress` (node.books.progress.Progress over prompts) is advanced when it returns."""
        from vllm import SamplingParams

        start = time.perf_counter()
        params = SamplingParams(
            n=n,
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            top_k=0,
            max_tokens=self.cfg.max_new_tokens,
            logprobs=0,  # the sampled token's own logprob only
            skip_special_tokens=True,
        )
        inputs = [
            {"prompt_token_ids": self.tokenizer(p, add_special_tokens=False)["input_ids"]} for p in prompts
        ]
        outputs = self.llm.generate(inputs, params, use_tqdm=False, lora_request=self._lora_request)
        groups = [[self._completion(c) for c in out.outputs] for out in outputs]  # [B][G]
        new_tokens = sum(len(c.token_ids) for g in groups for c in g)
        if progress is not None:
            progress.advance(len(groups))
        return GenerationResult(groups, time.perf_counter() - start, new_tokens, self.policy_version)

    def _completion(self, out) -> Completion:
        ids = list(out.token_ids)
        # logprobs=0 gives one {token_id: Logprob} per position holding the sampled token
        lps = [float(pos[tok].logprob) for pos, tok in zip(out.logprobs, ids)]
        return Completion(
            # the text is our tokenizer's decoding of the ids, exactly as the HF backend and every
            # receiver compute it (docs/PROTOCOL.md §2): vLLM's incremental detokenizer may differ
            text=self.tokenizer.decode(ids, skip_special_tokens=True),
            token_ids=tuple(ids),
            logprobs=tuple(lps),
            finish_reason="stop" if out.finish_reason == "stop" else "length",
        )

    def close(self) -> None:
        """Stop vLLM's engine process now (it would otherwise linger until interpreter exit)."""
        self.llm.llm_engine.engine_core.shutdown()
        del self.llm
        if self._tmp is not None:
            self._tmp.cleanup()
