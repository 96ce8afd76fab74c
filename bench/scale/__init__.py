"""The exchange simulated at 100 / 1,000 / 10,000 peers (`bench/scale_sim.py`, docs/BENCHMARKS.md §16).

    model.py   the modelled world: settings, peers (RTT, upload, NAT, sessions, clock skew, hostile),
               the DHT (who holds a key, what a read returns), costs measured from the real code
    sim.py     the discrete-event loop that drives the project's own exchange code over that world
    report.py  per-peer / per-holder accounting → one result row per setting, and the figure
"""
