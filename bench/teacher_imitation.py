"""A student loss for bench/teacher.py's arm Ti: F-TIS plus imitation of the peers' better-than-their-group answers.

    loss = F-TIS(inputs)  −  lam · (1/N) Σ_{i external, A_i > 0} mean_t log π_θ(y_i,t)

N is the step's row count (the same divisor as F-TIS's sequence mean), so with lam = 1 an external
row whose advantage is positive is pushed up as a policy-gradient row of advantage 1 would be,
without the importance weight π/μ that F-TIS puts on it (which shrinks a teacher's rows as the
student moves away from the teacher). The teacher's wrong answers (A ≤ 0) get no such term: NoIS on
all of a teacher's rows (arm Tn) harmed the student, and this separates the two halves.

This is the project's own variant for the experiment, not a paper's method: reward-filtered imitation
of another model's samples (rejection-sampling fine-tuning on a peer's successes) added to F-TIS.
Used as a custom loss: `loss: {name: bench.teacher_imitation:fis_with_imitation, lam: 1.0}`.
"""

from __future__ import annotations

from losses.base import LossInputs, LossOutputs, behaviour_view, reduce_rows
from losses.config import FISConfig
from losses.fis import fis_loss


def fis_with_imitation(inputs: LossInputs, *, lam: float = 1.0) -> LossOutputs:
    out = fis_loss(inputs, FISConfig(name="f-tis"))
    view = behaviour_view(inputs)
    imitate = (inputs.is_external & (view.advantages > 0)).to(view.seq_logp.dtype)
    term = reduce_rows(-view.seq_logp * imitate, view)
    metrics = {**out.metrics, "imitation_share": float(imitate.mean()), "imitation_loss": float(term.detach())}
    return LossOutputs(out.loss + lam * term, metrics)
