"""The receive-side bounds against one hostile peer, without a network (docs/PROTOCOL.md §3, §5–7): each failed
before its bound existed. The same bounds over real peers: tests/adversarial/test_exhaustion.py and
tests/adversarial/test_dial_and_dht.py.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest

from bench.harness.attacks import bomb_bundle
from bench.harness.records import completion, record
from protocols.codec import MAX_NAME_CHARS, RecordError, decode_bundle, encode_bundle
from protocols.keys import rollouts_key, window_of
from protocols.records import RolloutRecord
from swarm.dht.peer import OwnedEntriesValidator, read_keys
from swarm.exchange.admission import Admission, ServedBook
from swarm.exchange.inbox import NOTIFY_STRANGERS
from swarm.exchange.pending import Pending
from swarm.exchange.transport import Inbox, Limits, make_bundle
from swarm.net.dial import BURST, DialPolicy

T0 = 1_700_000_000.0


def _record(peer: str, index: int = 0, tokens: int = 2, name: str = "tiny-qwen2") -> RolloutRecord:
    return record(peer, index, model=name, completions=[completion("5" * tokens, tokens)])


# -- decoding under the receiver's budget ------------------------------------------------------------------

def test_a_bomb_is_dropped_while_decoding_under_the_receivers_budget():
    data, count = bomb_bundle(_record("peerA"))
    assert len(data) < 16 << 10 and count == 5
    records, drops = decode_bundle(data)  # the wire caps alone let every token through: 2^21 of them
    assert sum(len(c.token_ids) for r in records for c in r.completions) > 2_000_000
    records, drops = decode_bundle(data, completion_tokens=16)  # the budget: each bomb record dropped unpacked
    assert [r.task.index for r in records] == [0] and drops == Counter({"completion_too_long": 4})
    with pytest.raises(RecordError) as err:  # the budget's caps: not even decompressed past 1 MiB
        decode_bundle(data, Limits(completion_tokens=16).decode_caps(), 16)
    assert err.value.reason == "too_large"


def test_a_bundle_decodes_within_the_budgets_token_and_byte_caps():
    caps = Limits(completion_tokens=16).decode_caps()
    assert caps.max_bundle_tokens == 256 * 16 and caps.max_decompressed_bytes == 1 << 20
    assert Limits().decode_caps() == Limits().caps  # a transport without a node: the wire caps


def test_a_peers_model_name_is_cut_at_decode():
    data = encode_bundle([_record("peerA", name="N\x1b[2J" + "x" * ((4 << 20) - 64))])
    (rec,), _ = decode_bundle(data)
    assert len(rec.model.name) == MAX_NAME_CHARS and rec.model.name.startswith("N?[2J")


# -- what waits for the next round ---------------------------------------------------------------------------

def test_pending_records_stay_within_their_bytes_and_the_heaviest_peer_loses_its_own():
    book = Pending(max_bytes=1000)
    assert book.add("light", ["l"], 200) == 0
    for k in range(5):
        book.add("heavy", [f"h{k}"], 300)
    assert book.total <= 1000
    waiting = book.take()
    assert [w.records for w in waiting] == [["l"], ["h3"], ["h4"]]  # the heavy peer's oldest went
    assert book.add("big", ["b"], 5000) == 1 and book.count() == 0  # one over the bound alone: itself


def test_the_inbox_counts_what_it_displaces():
    limits = Limits(completion_tokens=8, max_pending_bytes=1 << 20)
    inbox = Inbox(limits, clock=lambda: T0 + 1)
    inbox._pending.max_bytes = 20_000  # a small bound for the arithmetic
    for k in range(8):
        data, value, ann = make_bundle("peerA", [_record("peerA", 10 * k + i, tokens=8) for i in range(4)], now=T0)
        inbox.settle_fetched(ann, data, "rlswarm")
    got = inbox.take(0, 0)
    assert got.drops["inbox_full"] > 0 and len(got.records) + got.drops["inbox_full"] == 32


# -- fan-in: a peer's share of the window -----------------------------------------------------------------

def _offer_many(inbox: Inbox, peer: str, n: int, now: float, start: int = 0) -> None:
    for k in range(start, start + n):
        _, value, _ = make_bundle(peer, [_record(peer, k)], now=now + k * 1e-3)
        inbox.offer(value, peer, now=now + 0.1)


def test_one_good_peer_with_many_candidates_takes_only_its_share():
    inbox = Inbox(Limits(max_fetches_per_window=16), rng=random.Random(0))
    now = T0 + 3  # the candidates are seconds old: not fresh, so not paced (tests/unit/swarm/test_fresh_first.py)
    for p in ("fast", "h1", "h2"):
        inbox.standing.good(p, now)
    _offer_many(inbox, "fast", 4, T0)  # at most 4 candidates per peer are kept
    _offer_many(inbox, "h1", 1, T0, start=100)
    _offer_many(inbox, "h2", 1, T0, start=200)
    first = Counter(a.peer for a in inbox.choose(now))
    assert first == Counter({"fast": 4, "h1": 1, "h2": 1})
    for round_ in range(5):  # "fast" keeps offering; the honest peers' next bundles come later
        _offer_many(inbox, "fast", 4, T0, start=1000 + 10 * round_)
        inbox.choose(now + 0.2 * round_)
    taken = Counter(p for t, p, _ in inbox._fetch_log)
    assert taken["fast"] == 6  # ⌈16 / 3⌉: the rest of the window waits for the others
    _offer_many(inbox, "h1", 1, T0, start=300)
    assert [a.peer for a in inbox.choose(now + 2)] == ["h1"]  # room left for a peer whose bundle comes late


def test_a_pushed_bundle_is_booked_against_the_peers_share():
    inbox = Inbox(Limits(max_fetches_per_window=16))
    now = T0 + 1
    for p in ("pusher", "h1", "h2"):
        inbox.standing.good(p, now)
    _offer_many(inbox, "h1", 1, T0, start=100)
    _offer_many(inbox, "h2", 1, T0, start=200)
    taken = 0
    for k in range(16):
        _, value, _ = make_bundle("pusher", [_record("pusher", 500 + k)], now=T0 + k * 1e-3)
        taken += inbox.claim(value, "pusher", now=now) is not None
    assert taken == 6  # before: 16 of 16


def test_an_offer_that_names_addresses_is_left_a_candidate_not_taken():
    inbox = Inbox(Limits())
    _, value, ann = make_bundle("peerA", [_record("peerA")], now=T0, addrs="/ip4/127.0.0.1/tcp/4001")
    assert inbox.claim(value, "peerA", now=T0 + 1) is None
    assert [a.sha256 for a in inbox.choose(T0 + 1)] == [ann.sha256]  # fetched by the fan-in choice instead


def test_pushes_go_to_good_peers_and_at_most_two_strangers_dated_by_our_clock():
    inbox = Inbox(Limits(), clock=lambda: T0 + 1)
    for k in range(10):  # strangers dating their announcements up to 119 s ahead of our clock
        _, value, _ = make_bundle(f"sybil{k}", [], now=T0 + 100 + k)
        inbox.offer(value, f"sybil{k}", now=T0 + 1)
    _, value, _ = make_bundle("good", [], now=T0)
    inbox.offer(value, "good", now=T0 + 1)
    inbox.standing.good("good", T0 + 1)
    targets = inbox.push_targets(8)
    assert targets[0] == "good" and len(targets) == 1 + NOTIFY_STRANGERS


# -- dials at addresses a peer chose ----------------------------------------------------------------------

def _pick(policy: DialPolicy, addrs: list[str]) -> list[str]:
    dial, joined = policy.pick(addrs)
    assert joined == []  # no event loop here: nothing is in flight
    return dial


def test_a_loopback_node_dials_only_loopback_addresses():
    policy = DialPolicy(["/ip4/127.0.0.1/tcp/4001"], clock=lambda: 0.0)
    picked = _pick(policy, ["/ip4/169.254.169.254/tcp/80", "/ip4/10.1.2.3/tcp/22", "/ip4/8.8.8.8/tcp/53",
                          "/dns4/example.org/tcp/1", "/ip4/127.0.0.1/tcp/6379"])
    assert picked == ["/ip4/127.0.0.1/tcp/6379"] and policy.stats["scope"] == 4


def test_a_public_node_never_dials_loopback_link_local_or_private_addresses():
    policy = DialPolicy(["/ip4/1.2.3.4/tcp/4001", "/ip4/127.0.0.1/tcp/4001"], clock=lambda: 0.0)
    assert _pick(policy, ["/ip4/127.0.0.1/tcp/6379", "/ip4/169.254.169.254/tcp/80", "/ip4/10.0.0.1/tcp/1",
                        "/ip4/0.0.0.0/tcp/1", "/ip4/8.8.8.8/tcp/4001"]) == ["/ip4/8.8.8.8/tcp/4001"]
    private = DialPolicy(["/ip4/10.0.0.2/tcp/4001"], clock=lambda: 0.0)
    assert _pick(private, ["/ip4/10.0.0.3/tcp/4001", "/ip4/127.0.0.1/tcp/1"]) == ["/ip4/10.0.0.3/tcp/4001"]
    # a node on loopback alone that joined through a bootstrap at its host's network address: its peers on the
    # host announce loopback addresses, and the network's private ones are dialled too
    local = DialPolicy(["/ip4/127.0.0.1/tcp/4001"], ["/ip4/10.0.0.2/tcp/31337/p2p/QmBoot"], clock=lambda: 0.0)
    assert _pick(local, ["/ip4/127.0.0.1/tcp/5", "/ip4/10.0.0.3/tcp/4001", "/ip4/169.254.169.254/tcp/80"]) == [
        "/ip4/127.0.0.1/tcp/5", "/ip4/10.0.0.3/tcp/4001"]


def test_dials_to_new_addresses_are_rate_limited_and_a_failed_one_waits():
    clock = [0.0]
    policy = DialPolicy(["/ip4/127.0.0.1/tcp/1"], clock=lambda: clock[0])
    targets = [f"/ip4/127.0.0.{k % 250 + 1}/tcp/{1000 + k}" for k in range(100)]
    dialled = sum(len(_pick(policy, [a])) for a in targets)
    assert dialled == BURST  # a burst, then ...
    clock[0] = 10.0
    assert sum(len(_pick(policy, [a])) for a in targets) == BURST  # ... RATE_PER_S a second (capped by the burst)
    trap = "/ip4/127.0.0.1/tcp/6379"
    clock[0] = 100.0
    assert _pick(policy, [trap]) == [trap]
    policy.outcome([trap], ok=False)
    assert _pick(policy, [trap]) == [] and policy.stats["waiting"] == 1
    clock[0] = 111.0
    assert _pick(policy, [trap]) == [trap]  # after RETRY_S, once more
    policy.outcome([trap], ok=False)
    clock[0] = 125.0
    assert _pick(policy, [trap]) == []  # the wait doubled
    good = "/ip4/127.0.0.1/tcp/4002"
    clock[0] = 200.0
    _pick(policy, [good])
    policy.outcome([good], ok=True)
    policy._tokens = 0.0
    assert _pick(policy, [good]) == [good]  # an address that worked costs no token


# -- stream admission and serving -------------------------------------------------------------------------

def test_admission_bounds_streams_per_peer_in_all_and_for_strangers():
    adm = Admission(per_peer=2, total=6, is_good=lambda p: p.startswith("good"))
    held = []
    for peer in ["s1", "s1", "s1", "s2", "s2", "s3", "s4", "good1", "good1", "good2", "good2"]:
        cm = adm.admit(peer)
        ok = cm.__enter__()
        held.append((cm, ok))
    oks = [ok for _, ok in held]
    assert oks == [True, True, False, True, False, False, False, True, True, True, False]
    assert adm.refused == Counter({"per_peer": 1, "strangers": 3, "total": 1})
    for cm, ok in held:
        cm.__exit__(None, None, None)
    assert adm._open == Counter() and adm._strangers == 0


def test_a_requester_is_served_one_bundle_at_most_twice():
    book = ServedBook(repeats=2, max_age_s=600, clock=lambda: T0)
    assert [book.allow("leech", "ab" * 32) for _ in range(5)] == [True, True, False, False, False]
    assert book.allow("other", "ab" * 32) and book.refused == 3


# -- unsigned DHT entries -----------------------------------------------------------------------------------

class _Item:
    def __init__(self, value):
        self.value = value


class _FakeNode:
    def __init__(self, found):
        self.found = found

    async def get_many(self, keys, **_):
        return {k: self.found.get(k) for k in keys}


def test_unsigned_entries_are_dropped_before_a_read_samples_its_entries():
    import asyncio

    from hivemind.dht.crypto import RSASignatureValidator
    from hivemind.utils.crypto import RSAPrivateKey
    owner = RSASignatureValidator(RSAPrivateKey()).local_public_key
    entries = {f"junk-{i}".encode(): _Item(b"x") for i in range(1000)}
    entries[owner] = _Item(b"signed")
    got = asyncio.run(read_keys(None, _FakeNode({"k": _Item(entries)}), ["k"], per_key=32, counted=True))
    total, picked = got["k"]
    assert total == 1 and [v for _, v in picked] == [b"signed"]  # before: 1 in 31 reads held it


def test_the_swarms_keys_refuse_unsigned_entries_on_store_and_read():
    from hivemind.dht.crypto import RSASignatureValidator
    from hivemind.dht.routing import DHTID
    from hivemind.dht.validation import DHTRecord
    from hivemind.utils.crypto import RSAPrivateKey
    from hivemind.utils.serializer import MSGPackSerializer
    v = OwnedEntriesValidator("rlswarm", window_s=10, shards=4, max_age_s=600, skew_s=120)
    key = DHTID.generate(source=rollouts_key("rlswarm", window_of(time.time(), 10), 2)).to_bytes()
    other = DHTID.generate(source="rlswarm_averaging.all_averagers").to_bytes()
    owned = MSGPackSerializer.dumps(RSASignatureValidator(RSAPrivateKey()).local_public_key)
    junk = MSGPackSerializer.dumps(b"junk-1")
    assert not v.validate(DHTRecord(key, junk, b"x", T0))  # before: stored, and read, like any entry
    assert v.validate(DHTRecord(key, owned, b"x", T0))  # an owner marker: the RSA validator checks its signature
    assert v.validate(DHTRecord(other, junk, b"x", T0))  # hivemind's own keys (averaging) are left alone


def test_a_senders_dht_requests_are_served_within_its_budget():
    from swarm.dht.budget import SenderBudget
    clock = [0.0]
    budget = SenderBudget(rate=64, burst=512, clock=lambda: clock[0])
    assert [budget.spend("flooder", 250) for _ in range(4)] == [True, True, False, False]  # a burst, then nothing
    assert budget.spend("honest", 4)  # another sender has its own budget
    clock[0] = 1.0
    assert not budget.spend("flooder", 250) and budget.spend("flooder", 64)  # 64 items a second after that
    assert budget.refused == 750
