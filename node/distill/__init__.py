"""On-policy distillation between peers: a teacher's log-probabilities on a student's own samples.

  score      the teacher's side: log π_teacher of each of a requester's tokens, in the requester's
             tokenization (token ids when the tokenizers match, chunk alignment across tokenizers),
             under a token budget checked before any forward pass

The message a score travels in is protocols.score; the student's estimator is losses.distill.
"""
