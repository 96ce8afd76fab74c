"""Benchmarks, by family, over one shared harness. Each script is run from the repository root as
`python -m bench.<family>.<script>` (`--help` says its arms and settings), prints its numbers side by side
and writes them to bench/results/<family>/; docs/BENCHMARKS.md holds the recorded runs.

    harness/      what every script shares: the swarm runner, the statistics, the resumable process pool,
                  the arms runner (jobs, paired differences, decision rules), the result writers, real peers without a model, the hostile peers' attacks
    learning/     does a node learn, and does sharing help: sapo, sharing, teacher, hetero, heterorl,
                  learning_margin, fis_ablation, federated, demo_seeds, plausibility
    exchange/     the exchange on real hivemind peers: gossip, capacity, crowded_shard, wire_bytes,
                  weight_broadcast
    scale/        the exchange simulated at 100 / 1,000 / 10,000 peers (run)
    reliability/  hostile peers, kills and restarts: exhaustion, injection, sybil/, soak/
    speed/        generation and the round on one machine: gpu, generation_batching, hf_loop, vllm_vs_hf,
                  overhead

A script imports the harness and the project's packages, never another script.
"""
