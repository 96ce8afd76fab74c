"""The soak: an hour of kills, restarts and hostile peers (`python -m bench.reliability.soak`).

    __main__   the run: bootstrap, nodes, the schedule of kills and restarts, the attackers
    processes  its processes: a role's lives (start, signal, reap), the throttle, RSS and CPU by part
    roles      the hostile peers it starts, each a real hivemind peer
    report     everything computed from the run's directory: round times, drops, restarts, RSS, tracebacks
"""
