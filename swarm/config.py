"""Swarm (transport) configuration: where to listen, whom to join, how long to wait, what to accept.

Public swarms: the default ``host_maddrs`` listens on loopback only, which is right for
``swarm local`` and tests but unreachable from other machines. A node joins a public swarm in one
of three ways (README "Joining a public swarm"; `swarm doctor` tells which one works here):

    reachable   listen on all interfaces with a fixed, open (forwarded) TCP port and announce the
                address others should dial; it serves its bundles to whoever pulls them
                    host_maddrs:     ["/ip4/0.0.0.0/tcp/31337"]
                    announce_maddrs: ["/ip4/<your public IP>/tcp/31337"]   # port 0 is refused
    client mode `client_mode: true` — behind a NAT or firewall that cannot be opened: the node
                listens nowhere, uses the DHT as a client, pulls peers' bundles over its own
                outbound connections and pushes its own to reachable peers (docs/PROTOCOL.md §6.3)
    relayed     `use_auto_relay: true` — libp2p circuit relay: p2pd reserves a slot at the
                bootstrap peers and announces addresses through them (their bandwidth carries
                the bytes)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from protocols.codec import DEFAULT_CAPS, Caps


def _check_maddr(addr: str, *, need_peer: bool) -> str:
    if not addr.startswith("/") or " " in addr:
        raise ValueError(f"{addr!r} is not a multiaddr (expected e.g. /ip4/127.0.0.1/tcp/31337/p2p/Qm...)")
    if need_peer and "/p2p/" not in addr:
        raise ValueError(f"{addr!r} has no /p2p/<peer id> part; copy the full address the bootstrap printed")
    return addr


class CapsConfig(BaseModel):
    """Decode limits for received bundles (protocols.codec.Caps), checked before allocation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_compressed_bytes: int = Field(DEFAULT_CAPS.max_compressed_bytes, ge=1024, le=1 << 30,
                                      description="largest bundle accepted on the wire (zstd frame)")
    max_decompressed_bytes: int = Field(DEFAULT_CAPS.max_decompressed_bytes, ge=1024, le=1 << 31,
                                        description="largest msgpack payload after decompression")
    max_records: int = Field(DEFAULT_CAPS.max_records, ge=1, le=1 << 20,
                             description="records (prompt groups) per bundle")
    max_completions: int = Field(DEFAULT_CAPS.max_completions, ge=1, le=1 << 16,
                                 description="completions per record (group size G)")
    max_tokens: int = Field(DEFAULT_CAPS.max_tokens, ge=1, le=1 << 24,
                            description="generated tokens per completion")
    max_text_chars: int = Field(DEFAULT_CAPS.max_text_chars, ge=1, le=1 << 26,
                                description="characters in any one string field (prompt, completion text)")
    max_bundle_tokens: int = Field(DEFAULT_CAPS.max_bundle_tokens, ge=1, le=1 << 30,
                                   description="generated tokens in one bundle, all completions together")

    def to_caps(self) -> Caps:
        return Caps(**self.model_dump())


class SwarmConfig(BaseModel):
    """How this node talks to the swarm: windowed DHT announcements + P2P bundle streams (docs/ARCHITECTURE.md §5)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="join a swarm; False runs the node alone (no transport)")
    swarm_id: str = Field("rlswarm", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$",
                          description="namespace of DHT keys and records; peers of other swarms are ignored")
    initial_peers: list[str] = Field(default_factory=list, max_length=64,
                                     description="bootstrap multiaddrs (with /p2p/<id>); empty starts a new swarm")
    host_maddrs: list[str] = Field(default_factory=lambda: ["/ip4/127.0.0.1/tcp/0"], min_length=1, max_length=16,
                                   description="listen addresses; loopback by default (see module docstring)")
    announce_maddrs: list[str] = Field(default_factory=list, max_length=16,
                                       description="addresses advertised to peers (public IP:port behind NAT)")
    client_mode: bool = Field(False, description="accept no inbound connections (behind NAT or a closed "
                              "firewall): listen nowhere, use the DHT as a client, push our bundles to reachable "
                              "peers instead of announcing them (docs/PROTOCOL.md §6.3)")
    push_peers: int = Field(8, ge=1, le=1024, description="client mode: recently seen peers each bundle is offered "
                            "to per publish (each takes it or declines by its own fan-in budget)")
    use_relay: bool = Field(True, description="libp2p circuit relay transport: dial peers that announce relayed "
                            "(/p2p-circuit) addresses")
    use_auto_relay: bool = Field(False, description="behind NAT without client mode: reserve a slot at the "
                                 "bootstrap peers (libp2p circuit relay v2) and announce addresses through them")
    identity_path: str | None = Field(None, description="RSA identity file (created if missing): a stable "
                                      "peer id across restarts; None uses a fresh identity per start")
    startup_timeout_s: float = Field(60.0, gt=0, le=600,
                                     description="p2p daemon start + DHT bootstrap, initial peers retried until then; "
                                     "p2pd can exceed 15 s on busy hosts")
    window_s: float = Field(10.0, ge=1, le=3600, description="swarm-wide: length of an announcement window "
                            "(announcements are keyed by ⌊time / window_s⌋); every peer of a swarm must agree")
    shards: int = Field(4, ge=1, le=4096, description="swarm-wide: keys one window's announcements are spread "
                        "over (about peers/64 for large swarms); every peer of a swarm must agree")
    read_shards: int | None = Field(None, ge=1, le=4096, description="shards read per window, chosen at random "
                                    "each poll; None = all (bounded fan-in reading for very large swarms)")
    max_age_s: float = Field(600.0, ge=5, le=86400, description="bundles older than this are not fetched, "
                             "served or trained on; also the DHT expiration of our announcements")
    max_clock_skew_s: float = Field(120.0, ge=0, le=3600, description="tolerated future timestamps from peers' clocks")
    max_fetches_per_window: int = Field(16, ge=0, le=100_000, description="fan-in: most bundles fetched per "
                                        "window_s of wall time from all peers together (fair per peer, newest "
                                        "first); 0 = none (a sampler, which never trains)")
    notify_peers: int = Field(8, ge=0, le=1024, description="recently seen peers a new announcement is pushed to "
                              "directly (the DHT is the fallback); 0 = DHT only")
    gossip: bool = Field(True, description="announce over libp2p gossipsub as well (p2pd runs pubsub; topics per "
                         "announcement shard, gossip_shards) and take peers' gossiped announcements, vetted like DHT "
                         "values; announcements are still stored in the DHT, which is read only every "
                         "gossip_poll_every-th poll interval while gossip delivers and no peer that only polls is "
                         "seen (swarm.exchange.poller); without pubsub in the daemon the node falls back to the DHT "
                         "alone; false = the DHT alone")
    gossip_shards: bool = Field(True, description="gossip on announcement shards sized to the swarm (topics "
                                "<swarm>/ann/v2/<level>/<shard>: a peer subscribes to its own shard, nested one level "
                                "either way, and gossip_extra_shards rotating ones, and publishes to its own; "
                                "docs/PROTOCOL.md §5), and on the previous version's one topic while a peer of that "
                                "version is heard there; false = that one topic alone, as the previous version did")
    gossip_shard_peers: int = Field(32, ge=4, le=4096, description="peers one announcement shard is sized for: "
                                    "2^level shards, level = round(log2(estimated swarm size / this)), at least 0 "
                                    "(the estimate from the DHT's routing table, swarm.dht.size)")
    gossip_shard_level: int | None = Field(None, ge=0, le=16, description="a fixed shard level (2^level shards) "
                                           "instead of the one the size estimate gives; None = estimated")
    gossip_extra_shards: int = Field(1, ge=0, le=8, description="shards of its level a peer subscribes to beside "
                                     "its own (each replaced by another every gossip_rotate_s), so that over time "
                                     "it hears peers of other shards")
    gossip_rotate_s: float = Field(600.0, ge=10, le=86400, description="how long an extra shard is kept before "
                                   "another replaces it (each peer at a moment of its own)")
    gossip_poll_every: int = Field(60, ge=1, le=10_000, description="while gossip delivers and every peer seen "
                                   "lately gossips, the DHT is read every this-many poll intervals instead of every "
                                   "one (to find peers that only poll, and newcomers' older announcements); "
                                   "1 = every interval")
    gossip_quiet_polls: int = Field(60, ge=1, le=100_000, description="gossip counts as delivering while a valid "
                                    "announcement arrived by it within this many poll intervals, and a peer seen "
                                    "only by polling keeps every interval reading for as long; after that the DHT "
                                    "is read every interval again")
    gossip_fetch_spread_s: float = Field(0.0, ge=0, le=30, description="in a swarm where gossip delivers from "
                                         "more than 16 peers (a publisher admits 16 bundle streams at once from "
                                         "peers not in good standing), the fan-in choice after a gossiped "
                                         "announcement waits a random 0 to this many seconds per 16 peers beyond "
                                         "16 (at most 3 times this), so that the receivers gossip reaches within "
                                         "milliseconds of each other do not all fetch from the publisher at once; "
                                         "0 (the default: a publisher's busy answer spreads them instead, and a "
                                         "candidate that waited is no longer fresh) and with 16 peers or fewer, the "
                                         "choice runs at once")
    gossip_ban_s: float = Field(300.0, ge=0, le=86400, description="a peer that itself signed more than its "
                                "gossip allowance (more than 30 distinct announcements dated within one 10 s slot) "
                                "is banned this long: its gossiped messages are dropped unread (drop reason "
                                "banned), nothing more (no disconnect); a replay of its messages never counts "
                                "(gossip_duplicate, gossip_stale); 0 = no bans")
    wait_s: float = Field(0.0, ge=0, le=3600, description="longest a round waits for peers' groups while its pool "
                          "holds fewer than select.external_groups and a peer in good standing (its records were "
                          "used within good_for_s, nothing of it failed since) has sent nothing since the last "
                          "round and did not let the last wait run out; 0 = never wait")
    good_for_s: float = Field(120.0, ge=1, le=86400, description="a peer whose records this node used within this "
                              "long, with no failure since, is in good standing: rounds wait only for such peers "
                              "and their bundles are fetched first (docs/PROTOCOL.md §7.2)")
    backoff_s: float = Field(10.0, ge=0, le=3600, description="a peer whose fetch fails or times out, or whose "
                             "records are all dropped, is not fetched for this long, doubled each time it fails "
                             "again after a backoff (failures during one add nothing; at most max_age_s)")
    max_peers: int = Field(4096, ge=16, le=1 << 20, description="peers tracked as seen and as judged (identities "
                           "are free: past this, those not in good standing are forgotten first)")
    start_with_peers: int = Field(0, ge=0, le=100_000, description="before its first round, wait until this many "
                                  "peers have been seen, and vouch for them (in good standing until they fail: "
                                  "rounds may wait for them); `swarm local` sets nodes − 1 so a local swarm "
                                  "starts together; 0 = start at once")
    start_wait_s: float = Field(120.0, ge=0, le=86400, description="longest wait for start_with_peers")
    poll_interval_s: float = Field(0.5, ge=0.05, le=30, description="DHT announcement polling period")
    dht_timeout_s: float = Field(10.0, gt=0, le=120, description="bound on one DHT get/store")
    fetch_timeout_s: float = Field(30.0, gt=0, le=600, description="bound on fetching one bundle")
    max_concurrent_fetches: int = Field(8, ge=1, le=256, description="bundle downloads in flight at once")
    dht_read_beam: int = Field(0, ge=0, le=64, description="peers a poll read keeps in its DHT search per key "
                               "(hivemind's beam_size); 0 = hivemind's default, its bucket size (20). Each read "
                               "searches for the newest value, so it asks every peer in the beam")
    dht_max_held_mib: float = Field(32.0, ge=1, le=4096, description="what this peer's DHT process holds for "
                                    "other peers, at most: each record charged its bytes and hivemind's books of "
                                    "it (about 2 KiB) until it expires; one sender at most an eighth of it; a value "
                                    "over 4 KiB or expiring more than 8 days ahead is refused whatever the room "
                                    "(swarm.dht.holdings; an honest swarm's announcements take well under 1 MiB)")
    max_entries_per_key: int = Field(32, ge=1, le=1024, description="announcements read from one DHT key per "
                                     "poll (a random subset when a shard holds more)")
    serve_max_bytes: int = Field(256 << 20, ge=1 << 20, le=1 << 36, description="memory for our own bundles "
                                 "served to peers (oldest dropped first, and any older than max_age_s)")
    max_records_per_peer_window: int = Field(256, ge=1, le=1 << 20,
                                             description="quota: records one peer may deliver per window")
    max_bytes_per_peer_window: int = Field(16 << 20, ge=1024, le=1 << 30,
                                           description="quota: wire bytes one peer may deliver per window")
    max_pending_bytes: int = Field(32 << 20, ge=1 << 20, le=1 << 36, description="peers' decoded records waiting "
                                   "for the next round, all peers together, by their estimated size in memory (at "
                                   "least one bundle at the decode caps); past it the peer holding the most loses its "
                                   "oldest (counted inbox_full)")
    caps: CapsConfig = Field(default_factory=CapsConfig, description="decode limits for received bundles (a node also "
                             "drops, while decoding, completions longer than its own budget: completion_too_long)")

    @field_validator("initial_peers")
    @classmethod
    def _peers(cls, v: list[str]) -> list[str]:
        return [_check_maddr(a, need_peer=True) for a in v]

    @field_validator("host_maddrs")
    @classmethod
    def _hosts(cls, v: list[str]) -> list[str]:
        return [_check_maddr(a, need_peer=False) for a in v]

    @field_validator("announce_maddrs")
    @classmethod
    def _announce(cls, v: list[str]) -> list[str]:
        for a in v:
            _check_maddr(a, need_peer=False)
            if a.rstrip("/").endswith("/tcp/0") or "/tcp/0/" in a or "/udp/0/" in a or a.endswith("/udp/0"):
                raise ValueError(f"{a!r}: announce an explicit port, not 0")
        return v

    @model_validator(mode="after")
    def _client_mode_listens_nowhere(self) -> SwarmConfig:
        if self.enabled and self.client_mode and not self.initial_peers:
            raise ValueError("client_mode joins through the initial peers it dials: set swarm.initial_peers "
                             "(--initial-peers or --initial-peers-file)")
        if self.client_mode and self.use_auto_relay:
            raise ValueError("client_mode and use_auto_relay exclude each other: a client-mode node accepts no "
                             "connections, relayed ones included")
        return self
