"""A sampler's weight load into the vLLM backend (HeteroRL): the learner's bytes in, its distribution out.

The sampler path of node.heterorl.state: `apply_weights` the learner's safetensors bytes into the
sampler's model, then `sync_weights(force=True)` pushes them into vLLM; the next generate call must
sample from the learner's weights (logprobs equal to the learner's own scoring pass, the tolerance
of test_vllm_backend.py) and report the learner's version.
"""

from __future__ import annotations

import pytest
import torch

from node.generation.config import GenerationConfig, VLLMOptions
from node.heterorl.weights import apply_weights, export_weights
from node.models.config import ModelConfig
from node.models.load import load_model
from node.round.logprobs import TokenRow, score_rows
from tests.vllm.test_vllm_backend import ATOL, _max_abs_diff, _prompts

pytestmark = pytest.mark.vllm


def test_sampler_loads_learner_weights_into_vllm(tmp_path):
    from node.generation.vllm import VLLMGenerator

    sampler, learner = load_model(ModelConfig(spec="tiny-qwen2")), load_model(ModelConfig(spec="tiny-qwen2"))
    cfg = GenerationConfig(backend="vllm", temperature=1.0, max_new_tokens=16,
                           vllm=VLLMOptions(enforce_eager=True, max_model_len=256, max_num_seqs=64, seed=3))
    gen = VLLMGenerator(sampler.model, sampler.tokenizer, cfg, work_dir=tmp_path)
    try:
        tok, prompts = learner.tokenizer, _prompts(learner)
        rows = [TokenRow(tok(p, add_special_tokens=False)["input_ids"], [tok(" 5", add_special_tokens=False)["input_ids"][0]])
                for p in prompts]
        opt = torch.optim.Adam(learner.model.parameters(), lr=0.1)
        for _ in range(2):  # the learner moves away from the sampler's initial weights
            opt.zero_grad()
            logp, _ = score_rows(learner.model, rows, 1.0, tok.pad_token_id)
            (-logp.mean()).backward()
            opt.step()
        learner.model.eval()
        apply_weights(sampler.model, export_weights(learner.model), "full")
        gen.sync_weights(sampler.model, 7, force=True)
        res = gen.generate(prompts, n=4)
        assert res.policy_version == 7
        assert _max_abs_diff(learner.model, tok, prompts, res.groups, 1.0) <= ATOL
    finally:
        gen.close()
