"""Federated mode: private client data, LoRA adapters averaged without a server, PubSwap public steps.

  round     run_federated_round: the federated node's round function
  mode      Federated (state, averaging, FedProx), FederatedTasks, build_public_groups
  pubswap   the Balanced and Random rules (pure)
  split     the Dirichlet(α) split of task families across clients (pure)
  config    FederatedConfig, PubSwapConfig, SplitConfig (torch-free)
"""
