"""The `hf-generate` backend: transformers `generate` on the training model itself — the reference the
`hf` backend's own decode loop (node.generation.hf) is compared with (greedy tokens, logprobs, speed).

It follows the logprob convention of node.generation.base: log μ(y_t) = log_softmax(logits / T)[y_t].
With top_p < 1 the nucleus truncation is *not* renormalised into the logprob (as TRL).

It generates every prompt × G in as few `generate` calls as the batch cap allows (DASH preemptive
sampling: sample big, back-propagate small). Raw logits come from `output_logits=True`
(`compute_transition_scores` would return the *processed* distribution), so `generate` holds every step's
logits at once, [B·G, L, V] in the model's dtype — the memory the `hf` loop never spends; the log μ are
then taken one step at a time, each step's logits freed once read (a stacked float32 copy and its
log-softmax came to ≈ 78 GiB for bench.speed.gpu's 128 rows × 256 tokens of a 151,936 vocabulary).
"""

from __future__ import annotations

import torch
import transformers

from node.generation.base import (
    GenerationResult,
    generate_in_batches,
    trimmed_completion,
)
from node.generation.config import GenerationConfig
from protocols.records import Completion


class HFGenerateGenerator:
    """transformers `generate`, batched across prompts × G, on the training model itself."""

    def __init__(self, model: torch.nn.Module, tokenizer, cfg: GenerationConfig):
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = cfg

    decode_mode = "eager: transformers generate (the hf-generate backend)"

    def sync_weights(self, model: torch.nn.Module, policy_version: int, *, force: bool = False) -> None:
        self.model = model  # same object: generation always sees the freshest weights

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, progress=None) -> GenerationResult:
        """`progress` (a node.books.progress.Progress over prompts), when given, advances after each batch."""
        return generate_in_batches(self._generate_chunk, prompts, n, self.cfg.max_batch_sequences, progress)

    def _generate_chunk(self, prompts: list[str], n: int) -> list[list[Completion]]:
        tok = self.tokenizer
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = enc.to(next(self.model.parameters()).device)  # train.device: the model generates where it trains
        was_training = self.model.training
        self.model.eval()
        try:
            out = self.model.generate(**enc, generation_config=self._hf_config(n))
        finally:
            self.model.train(was_training)
        prompt_len = enc["input_ids"].shape[1]
        seqs = out.sequences[:, prompt_len:]  # [B*G, L]
        token_lp = torch.stack([  # [B*G, L]: one step's raw logits [B*G, V] at a time, freed as they are read
            torch.log_softmax(step.float() / self.cfg.temperature, dim=-1).gather(-1, seqs[:, t, None]).squeeze(-1)
            for t, step in enumerate(self._drain(out))], dim=1)
        completions = [trimmed_completion(self.tokenizer, seqs[i].tolist(), token_lp[i].tolist())
                       for i in range(seqs.shape[0])]
        return [completions[i * n : (i + 1) * n] for i in range(len(prompts))]

    @staticmethod
    def _drain(out):
        """`generate`'s per-step logits, each let go once yielded: the [B·G, L, V] they hold together is the
        backend's whole cost, and nothing beside it is ever built from them (no stacked or float32 copy of it)."""
        logits = list(out.logits)
        out["logits"] = None  # the output (a dict and an object) holds them twice
        for t in range(len(logits)):
            step, logits[t] = logits[t], None
            yield step

    def _hf_config(self, n: int) -> transformers.GenerationConfig:
        # A fresh config: a checkpoint's own generation_config.json (top_k=50, repetition
        # penalties, …) must not silently change the distribution the logprobs describe.
        return transformers.GenerationConfig(
            do_sample=True,
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            top_k=0,
            max_new_tokens=self.cfg.max_new_tokens,
            num_return_sequences=n,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.tokenizer.eos_token_id,
        )
