"""Exchange: how records travel between peers — the interface the node calls, the receive rules, the Inbox,
the two transports and the streams under the real one.

  transport  the Transport interface the node calls (with its side channels: weights, score link, averager), and
             InboxFront: the calls answered from the Inbox
  receive    the receive rules as pure functions: limits, vetting, opening a bundle
  inbox      the receiver's book: candidates, standing, delivery
  fanin      its fan-in choice: which candidates are fetched, with per-peer shares and the newcomers' reserve
  pending    decoded records waiting for the next round, bounded in bytes
  standing   per-peer standing: whom a round waits for, whose bundles come first, who is backed off
  polling    which DHT keys each poll reads, and how often a crowded one is read
  poller     the DHT poll loop, and its back-off while gossip delivers
  twin       an in-memory twin of the transport for unit tests (its side channels: the weight and score twins)
  hivemind   the real one: DHT announcements + libp2p bundle streams
  handlers   the streams it answers (bundle, notify, push, info)
  admission  streams per peer and in all, download slots, bundles served per requester
  fetch      fetching one announced bundle
  push       pushing our bundle to chosen peers, and receiving a peer's push
  gossip     announcements over gossipsub beside the DHT (swarm.gossip, on by default), its fallback and report
  shards     which gossip topics a peer subscribes to and publishes on: announcement shards sized to the swarm
  gossip_guard  our own limit on a gossip spammer that replays cannot turn on its victim: a seen-cache, a per-signer
                allowance on its own timestamps, expiring bans (no disconnects)
  score_stream  the score stream of on-policy distillation: a student's request, a teacher's answer (both transports)
  loop       the transport's asyncio loop: its exception handler, emptied before it closes
"""
