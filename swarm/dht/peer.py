"""Starting this process's hivemind DHT peer under its identity: the one place both nodes and bootstrap peers do it.

`start_swarm_dht(cfg)` loads (or creates) the RSA identity at `cfg.identity_path` — or writes a
fresh one to a private temp file that is deleted once p2pd has read it — and starts
`hivemind.DHT` with the signature validator of that key, so the DHT's peer id and the key that
signs announcements are the same (swarm.net.identity). Hivemind traps handled: `DHT(start=True)`
explicitly, `startup_timeout` from config (p2pd can exceed hivemind's 15 s default on a busy
host), a bootstrap that does not answer tried again until that timeout is spent (hivemind dials the
initial peers only once), then turned into `BootstrapUnreachable` with one line. p2pd's own start is never
given less than P2PD_START_S, however little of that timeout is left (a start squeezed to 1 s failed on a busy
machine, and was taken for p2pd refusing its pubsub flags). Client mode and
relay options go to hivemind here (`network_options`), and `gossip` starts its p2pd with pubsub on.
`read_keys` is the DHT read that runs inside the DHT process (the transport's and the weight
channel's polls).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import shutil
import signal
import time
from collections.abc import Sequence

import hivemind.dht.node
from hivemind import DHT
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import DHTRecord, RecordValidatorBase
from hivemind.utils.crypto import RSAPrivateKey
from hivemind.utils.serializer import MSGPackSerializer

from protocols.keys import rollouts_key, window_of
from swarm.config import SwarmConfig
from swarm.dht.budget import install as install_sender_budget
from swarm.dht.entries import pick_entries
from swarm.dht.holdings import install as install_holdings
from swarm.dht.leaks import install as install_leak_fixes
from swarm.net.identity import (
    ephemeral_identity,
    load_or_create_identity,
    peer_id_of_subkey,
)
from swarm.net.pubsub import PubsubP2P

log = logging.getLogger(__name__)
P2PD_START_S = 15.0  # the least time p2pd is given to start (hivemind's default): local work, slow under load


class QuietOrphanDHT(DHT):
    """hivemind's DHT process, which ends quietly once the process that started it is gone (kill -9, OOM).

    hivemind's DHT child reads requests from a pipe to its parent; a parent killed outright leaves that
    pipe broken, and the child printed the read's error into the node's log — EOFError (an uncaught
    "Process DHT-1:" traceback) or, when the kill landed mid-request, ConnectionResetError (logged with
    its traceback, then retried until the orphan watchdog stopped it). Here the child asks the kernel
    for SIGTERM when its parent dies (Linux), drops hivemind's log records once it is an orphan, and
    leaves with exit code 0 instead of a traceback if the broken pipe ends its loop first. It also serves
    each sender's DHT requests within a budget (swarm.dht.budget), holds within `held_bytes` what peers store at it
    (swarm.dht.holdings) and keeps nothing of every key it read or call a peer cancelled (swarm.dht.leaks). With `pubsub`, its p2pd runs gossipsub
    (swarm.net.pubsub.PubsubP2P, bound in this process only to the name hivemind's DHTNode starts p2pd with)."""

    def __init__(self, *args, pubsub: bool = False, held_bytes: int = 32 << 20, **kwargs):
        self.pubsub, self.held_bytes = pubsub, held_bytes  # set before DHT.__init__ starts the child process
        super().__init__(*args, **kwargs)

    def run(self) -> None:
        parent = os.getppid()

        def orphaned(wait_s: float = 0.0) -> bool:
            # the parent's pipes break (exit_files) a moment before the kernel reparents us (exit_notify)
            deadline = time.monotonic() + wait_s
            while os.getppid() == parent and time.monotonic() < deadline:
                time.sleep(0.01)
            return os.getppid() != parent

        def keep(record: logging.LogRecord) -> bool:
            broken = record.exc_info is not None and isinstance(record.exc_info[1], (EOFError, OSError))
            return not orphaned(1.0 if broken else 0.0)

        _die_with_parent()
        if orphaned():
            os._exit(0)
        logging.getLogger("hivemind.dht.dht").addFilter(keep)
        install_holdings(self.held_bytes)  # what we hold for other peers, bounded (swarm.dht.holdings)
        install_sender_budget()  # stores and finds served per sender (swarm.dht.budget), in this process only
        install_leak_fixes()  # nothing kept for every key read or call cancelled (swarm.dht.leaks)
        if self.pubsub:
            hivemind.dht.node.P2P = PubsubP2P
        try:
            super().run()
        except BaseException:
            if orphaned(1.0):
                os._exit(0)
            raise


def _die_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGTERM) where there is one (Linux); elsewhere the orphan watchdog stops us."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class BootstrapUnreachable(RuntimeError):
    """None of the initial peers answered within the startup timeout (message: one line)."""

    @classmethod
    def for_peers(cls, peers: Sequence[str], timeout_s: float) -> BootstrapUnreachable:
        return cls(f"none of the initial peers answered within {timeout_s:g} s: {', '.join(peers)}; "
                   "check the addresses (copy one line printed by `swarm bootstrap`) and that the peer is running, "
                   "or start one with `swarm bootstrap`")


# hivemind's caching of what reads find, off: every read of ours asks for the newest value (read_keys, expiry), which a
# cached copy never is, so the local cache only held a copy of every dictionary read — with the expiration the
# answering replica chose — and the copies pushed to the nearest peer after each read were stores of ours at others
DHT_CACHE = {"cache_locally": False, "cache_nearest": 0}


def network_options(cfg: SwarmConfig) -> dict:
    """hivemind DHT / p2pd options of how this peer is reached (swarm.config module docstring).

    Client mode: hivemind's `client_mode` (serves no DHT requests; p2pd's DHT as a client) and
    p2pd's `no_listen` (no listen address at all: nobody can dial us, we dial out)."""
    opts: dict = {"use_relay": cfg.use_relay, "use_auto_relay": cfg.use_auto_relay}
    if cfg.client_mode:
        opts.update(client_mode=True, no_listen=True)
    return opts


def start_swarm_dht(cfg: SwarmConfig) -> tuple[DHT, RSAPrivateKey, RSASignatureValidator]:
    """A started DHT peer with its identity key and that key's validator (see module docstring)."""
    if cfg.identity_path is not None:
        key, _ = load_or_create_identity(cfg.identity_path)
        path, tmp_dir = cfg.identity_path, None
    else:
        key, tmp = ephemeral_identity()
        path, tmp_dir = str(tmp), tmp.parent
    validator = RSASignatureValidator(key)
    try:
        dht = _start(cfg, path, validator, fresh_identity=tmp_dir is not None)
    finally:
        if tmp_dir is not None:
            shutil.rmtree(tmp_dir, ignore_errors=True)  # p2pd has read it (or failed)
    return dht, key, validator


def _start(cfg: SwarmConfig, identity_path: str, validator: RSASignatureValidator, fresh_identity: bool) -> DHT:
    """Start the DHT; while none of the initial peers answers, start it again until `startup_timeout_s` is spent.

    hivemind dials the initial peers once, when the DHT starts: a node started while its bootstrap is
    down (restarting, briefly unreachable) failed at once even if the bootstrap was back a second later.
    Here each failed bootstrap is retried after 1, 2, 4 … 8 s (a fresh p2pd each time) within the
    startup timeout, and only then is it `BootstrapUnreachable`. With `gossip`, a p2pd that fails to start for
    another reason (it refuses the pubsub flags) is started once more without them: the returned DHT's `pubsub`
    is then False, and the transport falls back to the DHT alone (swarm.exchange.gossip)."""
    deadline = time.monotonic() + cfg.startup_timeout_s  # for reaching an initial peer; p2pd's own start has its own
    pause = 1.0
    pubsub = cfg.gossip
    while True:
        left = deadline - time.monotonic()
        try:
            return QuietOrphanDHT(start=True, await_ready=True, initial_peers=list(cfg.initial_peers),
                                  host_maddrs=list(cfg.host_maddrs), announce_maddrs=list(cfg.announce_maddrs) or None,
                                  identity_path=identity_path, startup_timeout=max(left, P2PD_START_S),
                                  bootstrap_timeout=max(left, 1.0), record_validators=[validator, owned_entries(cfg)],
                                  check_if_identity_free=not fresh_identity, pubsub=pubsub,
                                  held_bytes=int(cfg.dht_max_held_mib * 2**20), **DHT_CACHE, **network_options(cfg))
        except Exception as exc:  # hivemind raises RuntimeError / P2PDaemonError / TimeoutError here
            if pubsub and not _bootstrap_failure(exc) and not _daemon_slow(exc):  # p2pd refused its pubsub flags
                log.warning("p2pd did not start with pubsub (%s); starting it without: announcements go through "
                            "the DHT alone", str(exc).splitlines()[0][:200] if str(exc) else repr(exc))
                pubsub = False
                continue
            if not (cfg.initial_peers and _bootstrap_failure(exc)):
                raise
            wait = min(pause, deadline - time.monotonic() - 0.5)
            if wait <= 0:
                raise BootstrapUnreachable.for_peers(cfg.initial_peers, cfg.startup_timeout_s) from None
            log.warning("none of the initial peers answered; trying again in %.0f s (for up to %.0f s more)",
                        wait, deadline - time.monotonic())
            time.sleep(wait)
            pause = min(pause * 2, 8.0)


def owned_entries(cfg: SwarmConfig) -> OwnedEntriesValidator:
    """The validator that keeps unsigned entries out of this swarm's announcement keys."""
    return OwnedEntriesValidator(cfg.swarm_id, window_s=cfg.window_s, shards=cfg.shards, max_age_s=cfg.max_age_s,
                                 skew_s=cfg.max_clock_skew_s)


def _daemon_slow(exc: BaseException) -> bool:
    """p2pd did not say it was ready within its start-up time (a busy machine), as opposed to refusing to start."""
    return "failed to start in" in str(exc)


def _bootstrap_failure(exc: BaseException) -> bool:
    return "bootstrap" in str(exc).lower() or isinstance(exc, (TimeoutError, asyncio.TimeoutError))


async def read_keys(_dht, node, keys: list[str], per_key: int, counted: bool = False, beam: int = 0,
                    prefer=(), avoid=()) -> dict:
    """Runs inside the DHT process: each key's newest values as (signer peer id, value), ≤ per_key each (those
    of `prefer` first, `avoid` last, at random within each: swarm.dht.entries.pick_entries); with `counted`, each
    key's (entries it held, those values); `beam` > 0: the search's beam size."""
    found = await node.get_many(keys, sufficient_expiration_time=float("inf"), **({"beam_size": beam} if beam else {}))
    rng = random.Random(os.urandom(8))
    out: dict = {}
    for key, item in found.items():
        value = getattr(item, "value", None)
        if value is None:
            continue
        if not hasattr(value, "items"):  # not a dictionary of signed subkeys: unsigned, dropped as forged
            out[key] = (1, [(None, repr(value)[:64])]) if counted else [(None, repr(value)[:64])]
            continue
        # unsigned entries are dropped before anything is counted or sampled: they cost no identity, and
        # sampled first they would push the signed ones out of the read (and make the poll plan read the key
        # less often); none is handed on, so nothing of them is counted as `forged` either
        signed = [(peer, v) for peer, v in ((peer_id_of_subkey(sub), v) for sub, v in value.items()) if peer]
        total = len(signed)
        signed = pick_entries(signed, per_key, rng, prefer, avoid)
        picked = [(peer, getattr(v, "value", v)) for peer, v in signed]
        out[key] = (total, picked) if counted else picked
    return out


class OwnedEntriesValidator(RecordValidatorBase):
    """Refuses, on store and on read, any entry under this swarm's announcement keys (the windows of the last
    max_age_s, and a clock skew either way) whose subkey is not an owner marker: such entries are unsigned,
    cost no identity, and could only crowd the signed ones out. hivemind stores records by the hash of their
    key, so the validator keeps the hashes of the keys that can be current now (all shards), recomputed when the
    window changes; hivemind's RSASignatureValidator checks the signatures of the owned ones. A DHT peer that
    answers a read with an unsigned entry under such a key has its whole answer discarded by hivemind (the
    other replicas still answer)."""

    def __init__(self, swarm_id: str, *, window_s: float, shards: int, max_age_s: float, skew_s: float):
        self.swarm_id, self.window_s, self.shards = swarm_id, window_s, shards
        self.back = int(math.ceil((max_age_s + skew_s) / window_s)) + 1
        self.ahead = int(math.ceil(skew_s / window_s)) + 1
        self._window, self._ids = None, frozenset()

    def _guarded(self) -> frozenset:
        window = window_of(time.time(), self.window_s)
        if window != self._window:
            self._window = window
            self._ids = frozenset(DHTID.generate(source=rollouts_key(self.swarm_id, w, s)).to_bytes()
                                  for w in range(window - self.back, window + self.ahead + 1) for s in range(self.shards))
        return self._ids

    def validate(self, record: DHTRecord) -> bool:
        if record.key not in self._guarded():
            return True
        try:  # the subkey arrives msgpack-serialised (bytes, for an owner marker)
            subkey = MSGPackSerializer.loads(record.subkey)
        except Exception:
            return False
        return peer_id_of_subkey(subkey) is not None

    def merge_with(self, other: RecordValidatorBase) -> bool:
        return False
