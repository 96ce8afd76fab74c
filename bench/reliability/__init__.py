"""Hostile peers, kills and restarts: what they cost a node (results in bench/results/reliability/).

    exhaustion   what one hostile peer can make a node spend: memory under decode bombs, fetch shares
    injection    how far a hostile peer raises a prefix of its choosing through training
    dht_memory   what a node's DHT child keeps over time (storage, hivemind's books, the allocators)
    sybil/       what many throwaway identities cost a node (`python -m bench.reliability.sybil`)
    soak/        an hour of kills, restarts and hostile peers (`python -m bench.reliability.soak`)
"""
