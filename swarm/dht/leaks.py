"""What hivemind's DHT process kept forever, dropped: an entry for every key it ever read, and every call it served
that the caller gave up on (docs/BENCHMARKS.md §15I).

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

`install()` patches both, in the DHT process only (swarm.dht.peer.QuietOrphanDHT.run, before the node starts);
`pruned_keys` and `dropped_calls` count what each removed there.
"""

from __future__ import annotations

from functools import partial

from hivemind.dht.node import DHTNode
from hivemind.p2p.p2p_daemon_bindings.control import ControlClient

pruned_keys = 0  # keys removed from pending_get_requests in this process
dropped_calls = 0  # served calls removed from _handler_tasks that hivemind would have kept


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

    init = ControlClient.__init__
    if not getattr(init, "prunes", False):
        def __init__(self, *args, **kwargs) -> None:
            init(self, *args, **kwargs)
            self._handler_tasks = _HandlerTasks()

        __init__.prunes = True
        ControlClient.__init__ = __init__


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
