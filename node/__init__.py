"""One node of the swarm: everything between the transport (swarm/) and the losses (losses/).

  node       Node: a node's state across rounds, on its parts
  assemble   build_parts(): the composition root, every part of a node built from its config
  runner     run(): the rounds, with the round function of the node's mode
  round/     the round itself (start at node.round.loop.run_round) and its steps
  federated/ federated mode: its round function, PubSwap rules, client split, adapter averaging
  tasks/     verifiable tasks (reasoning-gym), regeneration, verification
  generation/ generation backends (hf, vllm)
  models/    model specs, built-in models, loading, lab models
  heterorl/  HeteroRL: sampler and learner roles, the weight broadcast between them
  distill/   on-policy distillation: a teacher's log-probabilities on a requester's own tokens (score)
  config     NodeConfig: every subsystem's config assembled (torch-free)
  books/     the node's books: checkpoint (atomic checkpoints), metrics (JSONL, Prometheus, console line),
             tracking (TensorBoard, Weights & Biases), progress (k/N, elapsed and ETA of long work)

The operator's tools (the `swarm` command line, the dashboard, export) are in ops/, above node/.

docs/ARCHITECTURE.md describes the parts, their boundaries and a round's data flow.
"""
