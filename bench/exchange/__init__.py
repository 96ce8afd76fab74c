"""The exchange on real hivemind peers on 127.0.0.1, or across network namespaces (results in bench/results/exchange/).

    gossip             fan-in and publish → visible latency by swarm size
    capacity           how many real peers this machine holds, and how the DHT's costs grow with N
    latency            gossip against the DHT across hosts (network namespaces) 20–300 ms apart
    crowded_shard      does a bundle reach a node when throwaway identities fill its announcement key
    wire_bytes         bytes on the wire per generated token for real rollouts
    weight_broadcast   a learner's weights to its samplers: bytes and seconds
    spam               a gossip peer publishing 100× its share (one identity, or a fresh one per message): honest
                       peers' traffic, with and without the guard
"""
