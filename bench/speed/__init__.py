"""Generation and the round on one machine (results in bench/results/speed/).

    gpu                   a GPU workstation node's round: generation and the training step per precision setup
    gpu_round             one scenario of it, in a process of its own (a failure or OOM recorded, not fatal)
    generation_batching   tokens/s of the HF generator: one batched call against one prompt / sequence at a time
    hf_loop               the `hf` backend's decode loop against transformers `generate`
    vllm_vs_hf            HF `generate` against vLLM, and what DASH preemptive sampling saves per round
    overhead              the framework's own overhead per round against raw generate + train_step
"""
