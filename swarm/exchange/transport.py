"""The transport interface the node calls, and the receive-side rules every transport shares
(docs/ARCHITECTURE.md §5, docs/PROTOCOL.md §5–7): the pure rules are in swarm.exchange.receive, the book that
applies them (candidates, fan-in, standing) in swarm.exchange.inbox. swarm.exchange.twin runs them without a network.

The exchange, as seen by one node — by swarm time, never by round:

    publish(records)      → encode one bundle, serve its bytes (for max_age_s), announce
                            {window, count, nbytes, sha256, …} under the key of the current
                            time window (protocols.keys), and push the same announcement to a
                            few recently seen peers so they need not wait for their next poll
    (in the background)   → read the recent windows' announcements, vet each one, keep the valid
                            ones as fetch candidates, fetch a fair, bounded subset (at most
                            `max_fetches_per_window` bundles per window of wall time, one peer's
                            newest first, peers in good standing first and the fewest recent
                            fetches first among them), check and decode what arrives
    take(min_records, T)  → everything delivered since the last call; waits at most T seconds,
                            and only while fewer than `min_records` records are ready
    judge(outcomes)       → the node's verdict: which peers' records it used, which it dropped
                            entirely; only peers whose records were used recently earn a round's
                            wait, and failures back a peer off (swarm.exchange.standing)

Beside the rollouts, the same peer carries the side channels of three modes; the node opens each through its
transport and never asks which transport it holds:

    open_weights(follow, …)   HeteroRL's weight channel (swarm.weights.channel: rules and the in-memory twin;
                              swarm.weights.hivemind on the real one), docs/PROTOCOL.md §10
    open_score_link(…)        on-policy distillation's score stream (swarm.exchange.score_stream), docs/PROTOCOL.md §11
    open_averager(tensors, …) federated mode's adapter averager on this peer's DHT (swarm.weights.averaging);
                              None where there is no DHT (the in-memory twin: a federated node there trains alone)

Receive-side rules (identical for every transport, so unit tests on the twin cover them):
- each bundle is fetched and handed out once: dedupe by (peer, sha256);
- an announcement is vetted before any byte is fetched: the signer (the DHT subkey's key, or the
  authenticated stream's peer) must be the announced peer (`forged`); its window must be the
  key's window and agree with its `created_at`, its shard the publisher's (`bad_announcement`);
  it must be younger than `max_age_s` (`stale_age`) and not from the future beyond the clock
  skew (`future_timestamp`); its size within the caps (`too_large`, `too_many_records`) and
  the peer's quota for that window (`quota`);
- after the fetch: digest (`digest_mismatch`), bundle decode (codec reasons), the record count
  against the announcement (`count_mismatch`), then per record: `peer` must be the signer
  (`forged`), `swarm` ours (`wrong_swarm`).
Bundle-level reasons count one per bundle; record-level reasons one per record. Announcements
that were valid but never fetched because the fan-in budget was spent are counted apart
(`skipped`): that is a choice, not a fault. A bundle offered with its bytes by a peer that cannot
be dialled (docs/PROTOCOL.md §6.3) goes through the same vetting and the same budget and quota
booking (`Inbox.claim`) before a byte is read. A failed fetch (`fetch_failed`, `fetch_timeout`),
a refused bundle, or one whose every record is dropped backs its peer off; a backed-off peer's
announcements are dropped as `backoff` until its backoff ends. Nothing here ever raises on peer data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from protocols.records import RolloutRecord
from swarm.exchange.inbox import Inbox
from swarm.exchange.receive import (
    MAX_CANDIDATES_PER_PEER,
    Delivery,
    Limits,
    make_bundle,
    open_bundle,
    vet_announcement,
)

if TYPE_CHECKING:
    from swarm.exchange.score_stream import ScoreLink
    from swarm.weights.averaging import AdapterAverager
    from swarm.weights.channel import WeightChannel, WeightLimits

__all__ = ["MAX_CANDIDATES_PER_PEER", "Delivery", "Inbox", "InboxFront", "Limits", "Transport", "make_bundle",
           "open_bundle", "vet_announcement"]


class Transport(Protocol):
    peer_id: str

    def publish(self, records: list[RolloutRecord]) -> int: ...  # wire bytes published

    def take(self, min_records: int = 0, timeout: float = 0.0, *, while_earned: bool = False) -> Delivery: ...

    def peers_seen(self) -> int: ...  # peers with a valid announcement younger than max_age_s

    def earned(self) -> int: ...  # peers in good standing: the only ones a round waits for (swarm.exchange.standing)

    def judge(self, outcomes: dict[str, tuple[int, int]]) -> None: ...  # peer → (records used, records dropped)

    def vouch(self, limit: int) -> list[str]: ...  # peers seen, put in good standing (swarm.start_with_peers)

    def limit_completions(self, tokens: int) -> None: ...  # decode under our budget per completion (swarm.exchange.receive)

    # the side channels on the same peer (module docstring)
    def open_weights(self, follow: list[str], *, fmt: str, limits: WeightLimits, keep: int, poll_interval_s: float,
                     fetch_timeout_s: float, ttl_s: float) -> WeightChannel: ...

    def open_score_link(self, *, max_bytes: int, timeout_s: float) -> ScoreLink: ...

    def open_averager(self, tensors: list, *, prefix: str, target_group_size: int, min_group_size: int,
                      matchmaking_time_s: float, request_timeout_s: float,
                      allreduce_timeout_s: float) -> AdapterAverager | None: ...

    def shutdown(self) -> None: ...


class InboxFront:
    """The calls of `Transport` that every transport answers straight from its Inbox (written once here)."""

    inbox: Inbox

    def _refresh(self) -> None:
        """Bring the Inbox up to date before it is asked (a transport that polls in the background: nothing)."""

    def peers_seen(self) -> int:
        self._refresh()
        return self.inbox.peers_seen()

    def earned(self) -> int:
        return self.inbox.earned()

    def judge(self, outcomes: dict[str, tuple[int, int]]) -> None:
        self.inbox.judge(outcomes)

    def vouch(self, limit: int) -> list[str]:
        return self.inbox.vouch(limit)

    def limit_completions(self, tokens: int) -> None:
        """Decode peers' bundles under our own budget per completion (the node's, swarm.exchange.receive.Limits)."""
        self.inbox.limit_completions(tokens)
