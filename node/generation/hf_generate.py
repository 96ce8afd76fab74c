"""The `hf-generate` backend: transformers `generate` on the training model itself — the reference the
`hf` backend's own decode loop (node.generation.hf) is compared with (greedy tokens, logprobs, speed).

It follows the logprob convention of node.generation.base: log μ(y_t) = log_softmax(logits / T)[y_t].
With top_p < 1 the nucleus truncation is *not* renormalised into the logprob (as TRL).

It generates every prompt × G in as few `generate` calls as the batch cap allows (DASH preemptive
sampling: sample big, back-propagate small). Raw logits come from `output_logits=True`
(`compute_transition_scores` would return the *processed* distribution), so it holds every step's
logits at once, [B·G, L, V] in float32 — the memory the `hf` loop never spends.
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
        logits = torch.stack(out.logits, dim=1).float()  # [B*G, L, V] raw, pre-processing
        logprobs = torch.log_softmax(logits / self.cfg.temperature, dim=-1)
        token_lp = logprobs.gather(-1, seqs.unsqueeze(-1)).squeeze(-1)  # [B*G, L]
        completions = [trimmed_completion(self.tokenizer, seqs[i].tolist(), token_lp[i].tolist())
                       for i in range(seqs.shape[0])]
        return [completions[i * n : (i + 1) * n] for i in range(len(prompts))]

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
