"""The exchange simulated at 100 / 1,000 / 10,000 peers (`python -m bench.scale.run`, docs/benchmarks/scale.md §16, §16C, §16F;
results in bench/results/scale/).

    run.py         the front door: the settings, the goals, the table and the figure
    model.py       the modelled world: settings, peers (RTT, upload, NAT, sessions, clock skew, hostile),
                   the DHT (who holds a key, what a read returns), costs measured from the real code
    sim.py         the discrete-event loop that drives the project's own exchange code over that world
    calibrate.py   the costs measured from the real code, and the simulation compared with bench/results/exchange/gossip.json
    report.py      per-peer / per-holder accounting → one result row per setting, and the figure
    legacy.py      the poll plan as it was before reads were paced, for the "before" rows
    mesh.py        the modelled gossipsub mesh of the "gossip" setting: connections, meshes, heartbeats, flood
                   publish, forwarding, IHAVE / IWANT, and the bytes of every copy and control message
    gossipsim.py   the "gossip" setting: sim.py with every announcement also gossiped, each delivery offered to
                   the real Inbox and every DHT poll gated by the real PollGate (§16C); with `Setting.sharded`
                   on announcement shards (§16F)
    shardmesh.py   announcement shards: one mesh.py mesh per topic of the real swarm.exchange.shards.ShardPlan
"""
