"""The transport: the only package that imports hivemind or runs asyncio.

  transport           the Transport interface the node calls, and InboxFront: the calls answered from the Inbox
  receive             those rules as pure functions: limits, vetting, opening a bundle
  inbox               the receiver's book: candidates, fan-in with per-peer shares, standing, delivery
  pending             decoded records waiting for the next round, bounded in bytes
  memory              an in-memory twin of the transport for unit tests
  hivemind_transport  the real one: DHT announcements + libp2p bundle streams
  handlers            the streams it answers (bundle, notify, push, info)
  admission           streams per peer and in all, download slots, bundles served per requester
  dial                announced addresses: which to dial, at what rate
  wire                the bundle stream's framing (serve and fetch)
  dht                 starting this process's DHT peer under its identity, and its record validators
  dht_budget          the DHT requests a node serves each sender
  identity            RSA identity: libp2p peer id and DHT signing key in one
  polling             which DHT keys each poll reads, and how often a crowded one is read
  expiry              DHT expirations under which a peer's newest announcement always wins
  transport_loop      the transport's asyncio loop: its exception handler, emptied before it closes
  weights             weight broadcast (HeteroRL): the channel interface, the follower's rules, the twin
  hivemind_weights    the weight channel on hivemind: signed announcement, weights over a stream
  health              is this node's swarm machinery (DHT child, p2pd) still running?
  doctor              `swarm doctor`'s checks: can this machine take part, and what to fix
  bootstrap           a DHT-only bootstrap peer
  averaging           decentralized LoRA adapter averaging (federated mode)
  local               process plumbing of `swarm local`
  config              SwarmConfig (no hivemind import)
"""
