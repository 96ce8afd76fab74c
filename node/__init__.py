"""One node of the swarm: everything between the transport (swarm/) and the losses (losses/).

  node       Node: a node's state across rounds, built from its config
  runner     run(): the rounds, with the round function of the node's mode
  round/     the round itself (start at node.round.loop.run_round) and its steps
  federated/ federated mode: its round function, PubSwap rules, client split, adapter averaging
  tasks/     verifiable tasks (reasoning-gym), regeneration, verification
  generation/ generation backends (hf, vllm)
  models/    model specs, built-in models, loading, lab models
  heterorl/  HeteroRL: sampler and learner roles, the weight broadcast between them
  config     NodeConfig: every subsystem's config assembled (torch-free)
  checkpoint atomic checkpoints; metrics: JSONL, Prometheus, console line
  tracking   experiment trackers fed the metrics (TensorBoard, Weights & Biases)
  progress   k/N, elapsed and ETA of long work (model builds, evaluations, sweeps)
  export     `swarm export`: a run's newest checkpoint as a folder transformers or peft loads
  cli/       the `swarm` command line
  dashboard/ `swarm dashboard`: a live page of one or several runs

docs/ARCHITECTURE.md describes the parts, their boundaries and a round's data flow.
"""
