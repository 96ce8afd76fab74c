"""The node's books: what a run keeps on disk and reports as it goes.

  checkpoint  atomic, checksummed checkpoints: model or adapter, optimizer, RNG states, round counter
  metrics     per-round metrics: JSONL log, Prometheus endpoint, one console line per round
  tracking    experiment trackers fed the metrics (TensorBoard, Weights & Biases)
  progress    k/N, elapsed and ETA of long work (model builds, evaluations, sweeps)
"""
