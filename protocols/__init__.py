"""Everything that crosses the network, as pure data: wire records (records) and their codec (codec).

  records   the wire dataclasses: RolloutRecord, Completion, Announcement, …
  codec     bundles: msgpack + zstd, decoded under caps, drop reasons
  announce  announcements: the small signed map that names one bundle
  addrs     dial hints in announcements, and the network scope of an address
  keys      where announcements live in the DHT: swarm-time windows and shards
  weights   a learner's weight announcement (HeteroRL)
  score     a score request and its response: a teacher's log-probabilities on a student's tokens

Imports neither torch nor hivemind nor asyncio. docs/PROTOCOL.md is the normative text.
"""
