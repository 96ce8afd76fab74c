"""The DHT: this process's DHT peer, what it serves each sender, and how long its records live.

  peer       starting this process's DHT peer under its identity, and its record validators
  entries    which of one key's signed entries a read keeps (peers in good standing first)
  budget     the DHT requests a node serves each sender
  holdings   what a node's DHT process holds for other peers, bounded per record, per sender and in all
  leaks      what hivemind's DHT process kept forever, dropped (every key it read, every call cancelled)
  expiry     DHT expirations under which a peer's newest announcement always wins
  size       the swarm's size estimated from the DHT's routing table (it sizes the announcement shards)
  bootstrap  a DHT-only bootstrap peer
  relay      a bootstrap peer's subscription to a swarm's gossip topics, so that it relays
"""
