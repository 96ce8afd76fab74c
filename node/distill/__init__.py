"""On-policy distillation between peers: a teacher's log-probabilities on a student's own samples.

  config     the `distill` section: teachers to ask (peer ids only), λ and its schedule, the bounds on a teacher's
             values, the wait bound, serving and its budget
  score      the teacher's scoring: log π_teacher of each of a requester's tokens, in the requester's
             tokenization (token ids when the tokenizers match, chunk alignment across tokenizers; a request may
             mix both), prepared (tokenized, its padded cost and the model's context checked) before any forward pass
  serve      the teacher's service: score requests charged their padded cost before tokenizing, from a part of its
             own for each student it names and one pool for all strangers; refused at once beyond it; every
             request answered with a status
  student    the student's side: its own completions to a teacher its config names by peer id each round, the
             answers checked and put on its groups, every failure dropped with its reason
  gate       the headroom gate: a named teacher is asked only while its own answers, re-verified on our tasks,
             score a margin above ours
  mode       the node's Distill (service, student, λ of the round, the bounds from its config) on its transport

The messages are protocols.score, the stream swarm.exchange.score_stream, the student's estimator losses.distill (with
the bounds on what a teacher's values can do); docs/ARCHITECTURE.md §13 explains the whole.
"""
