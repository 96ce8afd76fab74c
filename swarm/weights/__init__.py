"""Weights between peers: the weight broadcast of HeteroRL and the adapter averaging of federated mode.

  channel    weight broadcast: the channel interface, the follower's rules, the in-memory twin
  hivemind   the weight channel on hivemind: signed announcement, weights over a stream
  averaging  decentralized LoRA adapter averaging (federated mode)
"""
