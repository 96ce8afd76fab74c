"""On-policy distillation between peers: a teacher's log-probabilities on a student's own samples.

  config     the `distill` section: teachers to ask, λ and its schedule, the wait bound, serving and its budget
  score      the teacher's scoring: log π_teacher of each of a requester's tokens, in the requester's
             tokenization (token ids when the tokenizers match, chunk alignment across tokenizers),
             under a token budget checked before any forward pass
  serve      the teacher's service: score requests answered under a token bucket, in all and per requester,
             refused at once beyond either
  student    the student's side: its own completions to a named teacher each round, the answers checked and
             put on its groups, every failure dropped with its reason
  mode       the node's Distill (service, student, λ of the round) on its transport, built by the node

The messages are protocols.score, the stream swarm.exchange.scoring, the student's estimator losses.distill;
docs/ARCHITECTURE.md §13 explains the whole.
"""
