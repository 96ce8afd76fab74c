"""Verifiable tasks: the node's task stream, exact regeneration of any task a peer names, its verifier.

  config      TaskConfig, DatasetSpec, FileDatasetSpec (torch-free; reasoning-gym only while validating)
  task        Task, TaskError
  gym         reasoning-gym datasets by (name, config, seed), cached
  files       dataset files of the user's own: rows, content hash, reward functions by import path
  file_order  which rows of a file are trained on, in which order, and which are held out
  source      TaskSource: sampling, held-out set, allow-list, regenerate, score, prompts (both kinds)
streams     task streams that never share an item, and held-out questions kept out of training
"""
