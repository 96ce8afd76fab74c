"""One node of the swarm: everything between the transport (swarm/) and the losses (losses/).

  node       Node: a node's state across rounds, built from its config
  runner     run(): the rounds, with the round function of the node's mode
  round/     the round itself (start at node.round.loop.run_round) and its steps
  federated/ federated mode: its round function, PubSwap rules, client split, adapter averaging
  tasks/     verifiable tasks (reasoning-gym), regeneration, verification
  generation/ generation backends (hf, vllm)
  models/    model specs, built-in models, loading, lab models
  config     NodeConfig: every subsystem's config assembled (torch-free)
  checkpoint atomic checkpoints; metrics: JSONL, Prometheus, console line
  cli/       the `swarm` command line

docs/ARCHITECTURE.md describes the parts, their boundaries and a round's data flow.
"""
