"""The transport: the only package that imports hivemind or runs asyncio.

  transport           the Transport interface and the receive rules every transport shares
  memory              an in-memory twin of the transport for unit tests
  hivemind_transport  the real one: DHT announcements + libp2p bundle streams
  wire                the bundle stream's framing (serve and fetch)
  dht                 starting this process's DHT peer under its identity
  identity            RSA identity: libp2p peer id and DHT signing key in one
  bootstrap           a DHT-only bootstrap peer
  averaging           decentralized LoRA adapter averaging (federated mode)
  local               process plumbing of `swarm local`
  config              SwarmConfig (no hivemind import)
"""
