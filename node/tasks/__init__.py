"""Verifiable tasks: the node's task stream, exact regeneration of any task a peer names, its verifier.

  config    TaskConfig, DatasetSpec (torch-free; reasoning-gym only while validating)
  gym       reasoning-gym datasets by (name, config, seed), cached
  source    TaskSource: sampling, held-out set, allow-list, regenerate, score, prompts
"""
