"""The transport: the only package that imports hivemind or runs asyncio. A folder per subsystem:

  exchange/  how records travel between peers: the Transport interface the node calls (with the side channels it
             opens on the same peer: weights, score link, averager) and InboxFront (the calls answered from the
             Inbox), the receive rules (receive, inbox, standing, pending), the in-memory twin (twin) and the real
             transport on hivemind (hivemind, with its streams: handlers, admission, fetch, push, polling, loop;
             gossip beside the DHT; the score stream: score_stream)
  dht/       this process's DHT peer and its record validators (peer), which of a key's entries a read keeps
             (entries), the requests it serves each sender (budget), expirations (expiry), a DHT-only bootstrap
             peer (bootstrap)
  net/       who this peer is (identity: libp2p peer id and DHT signing key), how it dials (dial), gossipsub
             through p2pd (pubsub), and the framing of our streams (wire)
  weights/   weight broadcast for HeteroRL (channel, and hivemind: the channel on hivemind) and decentralized
             LoRA adapter averaging for federated mode (averaging)
  host/      this machine's side: is the swarm machinery running (health), `swarm doctor`'s checks (doctor),
             process plumbing of `swarm local` (local), this machine's available memory (meminfo)
  config     SwarmConfig (no hivemind import)
  bucket     the token buckets every rate limit here uses (and node.distill.serve's budget)

Imports between them point down: config and bucket ← net ← dht ← weights ← exchange ← host
(tests/unit/test_architecture.py). The weight channel and the averager are below the exchange because the
transports open them; they reach the transport they live on through the object it hands them, never an import.
"""
