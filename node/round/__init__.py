"""The round: what one node does each round, in data-flow order (start at node.round.loop.run_round).

  loop      run_round: tasks → generate → verify → publish → gather → select → train → record
  parts     RoundParts: what a round reads of its node (built by the node), PolicyState: what it trains
  steps     the steps every round function shares (sample, verify, publish, gather, train)
  groups    verified groups: our rewards, within-group advantages
  records   our groups → wire records
  ingest    peers' records → verified groups (regenerate, re-verify, recompute; drops by reason)
  select    SAPO: I local + J external informative groups
  logprobs  log π_θ of completions in our tokenization
  train     rows, micro-batches, the loss, one optimizer step
align     byte alignment of two tokenizations of one completion text (peers with another tokenizer)
dedup     groups seen before, by content: a group that arrives twice is trained on once
delay     simulated network delay for HeteroRL experiments on one machine
sizing    `auto` micro-batch rows and gradient checkpointing, sized once at start by measurement
reference the reference policy of a KL penalty: the weights training started from
  report    the round's record, held-out eval and checkpoint at the end of a round
  record    RoundRecord: the round's fields by section, how each step metric combines; the JSONL reader
  config    TrainConfig, SelectConfig, IngestConfig (torch-free)
"""
