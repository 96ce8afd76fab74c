"""HeteroRL: sampler and learner roles, the weight broadcast between them (docs/ARCHITECTURE.md §12).

  config.py   the roles' config (torch-free)
  weights.py  a model's weights as bytes (safetensors: full state dict or LoRA adapter) and back, checked
  state.py    a role's state on a node: the weight channel, the delay line, the staleness book
  sampler.py  run_sampler_round: load the newest learner weights, generate, verify, publish
  learner.py  run_learner_round: gather samplers' records (delayed, bounded in staleness), train, publish weights
local.py    `swarm local` for HeteroRL: the --set items that wire a learner and its samplers together
"""
