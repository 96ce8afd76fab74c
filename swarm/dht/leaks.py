"""What hivemind's DHT process kept forever or grew without a store, dropped: an entry for every key it ever read,
every call it served that the caller gave up on, and what its reads merged into its own storage
(docs/benchmarks/reliability.md §15I).

- *Searches.* hivemind's `DHTNode` lets concurrent gets of one key share a search (`reuse_get_requests`): it files
  each search under its key in `pending_get_requests`, a defaultdict of SortedSets, and takes the search out of the
  set when it finishes (`_reuse_finished_search_result`) — but never the key. Every key a node ever read stayed
  there with an empty set, ≈ 1.8 KB each: a node reads each window's announcement keys (4 shards every 10 s,
  swarm.exchange.polling), ≈ 1,300–1,700 new keys an hour measured, for as long as it runs. Here, once hivemind has
  settled a finished search, a key whose set is now empty is removed; a key with searches still pending keeps its
  set, and the next get of a removed key files itself under a new one (all on the DHT process's one event loop).
- *Cancelled calls.* hivemind's p2pd client serves each incoming unary call (every DHT ping, store and find a peer
  sends) as a task filed under the call's id in `ControlClient._handler_tasks`, and removes it when the handler has
  answered — but not when the caller cancels the call (a DHT request that timed out on its side: the daemon
  forwards the cancel and the task ends in CancelledError, or never runs at all when the cancel comes first) nor
  when the protocol has no handler. Each such call stayed there, ≈ 7 KiB with its request, and any peer can send
  calls and cancel them. Here the client's table of tasks drops each task when it ends, however it ends.

- *Reads merged into storage.* A get first takes the value the node holds itself as its best candidate — the
  stored DictionaryDHTValue object itself, not a copy (`_SearchState.add_candidate`) — and then merges every
  other replica's answer into it, entry by entry. So each read of a key the node holds wrote every entry every
  replica returned into the node's own storage: entries no peer ever stored at it (past swarm.dht.holdings,
  which sees only stores), and one more expiration-heap entry per entry and replica on every read, each kept
  until that entry's expiration (measured: 11 heap entries for every entry held while 32 identities announced,
  reads then running every poll). Here a search that would adopt a dictionary takes a copy of it.

`install()` patches all three, in the DHT process only (swarm.dht.peer.QuietOrphanDHT.run, before the node
starts); `pruned_keys`, `dropped_calls` and `copied_reads` count what each did there.
"""

from __future__ import annotations

from functools import partial

from hivemind.dht.node import DHTNode, _SearchState
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.p2p.p2p_daemon_bindings.control import ControlClient
from hivemind.utils.timed_storage import ValueWithExpiration

pruned_keys = 0  # keys removed from pending_get_requests in this process
dropped_calls = 0  # served calls removed from _handler_tasks that hivemind would have kept
copied_reads = 0  # searches that took a copy of a stored dictionary instead of the stored one itself


def install() -> None:
    """Patch hivemind's DHTNode and p2pd client in this process (idempotent)."""
    settle = DHTNode._reuse_finished_search_result
    if not getattr(settle, "prunes", False):
        def _reuse_finished_search_result(self, finished) -> None:
            global pruned_keys
            settle(self, finished)
            pending = self.pending_get_requests
            if finished.key_id in pending and not pending[finished.key_id]:
                del pending[finished.key_id]
                pruned_keys += 1

        _reuse_finished_search_result.prunes = True
        DHTNode._reuse_finished_search_result = _reuse_finished_search_result

    adopt = _SearchState.add_candidate
    if not getattr(adopt, "prunes", False):
        def add_candidate(self, candidate, source_node_id) -> None:
            global copied_reads
            if (candidate is not None and not self.finished and isinstance(candidate.value, DictionaryDHTValue)
                    and not isinstance(self.binary_value, DictionaryDHTValue)):
                candidate = ValueWithExpiration(_copy(candidate.value), candidate.expiration_time)
                copied_reads += 1
            adopt(self, candidate, source_node_id)

        add_candidate.prunes = True
        _SearchState.add_candidate = add_candidate

    init = ControlClient.__init__
    if not getattr(init, "prunes", False):
        def __init__(self, *args, **kwargs) -> None:
            init(self, *args, **kwargs)
            self._handler_tasks = _HandlerTasks()

        __init__.prunes = True
        ControlClient.__init__ = __init__


def _copy(value: DictionaryDHTValue) -> DictionaryDHTValue:
    """A dictionary value of its own with `value`'s entries (what a search merges into, never our storage's)."""
    fresh = DictionaryDHTValue(value.maxsize)
    with fresh.freeze():
        for subkey, item in value.items():
            fresh.store(subkey, item.value, item.expiration_time)
    fresh.latest_expiration_time = value.latest_expiration_time
    return fresh


class _HandlerTasks(dict):
    """hivemind's ControlClient._handler_tasks, whose tasks leave it when they end, however they end (a task
    cancelled before it ever ran included: no code of its coroutine runs then)."""

    def __setitem__(self, call_id, task) -> None:
        super().__setitem__(call_id, task)
        task.add_done_callback(partial(self._ended, call_id))

    def _ended(self, call_id, task) -> None:
        global dropped_calls
        if self.get(call_id) is task:  # hivemind removes the ones its handler answered itself
            del self[call_id]
            dropped_calls += 1
