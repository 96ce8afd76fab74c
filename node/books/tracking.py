"""Experiment trackers fed the fields of metrics.jsonl: TensorBoard and Weights & Biases (optional extras).

`metrics.report_to: [tensorboard, wandb]` turns them on. Every round, each numeric field of the
metrics line becomes one scalar at step = round, under the same name as in metrics.jsonl
(`reward_mean`, `eval_accuracy`, `loss`, `kl_beh`, `groups_external`, …); the `drops` map
becomes `drops/<reason>`; strings, lists and nulls are skipped.

  tensorboard  event files in `metrics.tensorboard_dir` (default OUT/tensorboard), written with
               torch.utils.tensorboard and flushed every round; `tensorboard --logdir OUT`.
  wandb        one run per node (project `metrics.wandb_project`, named after the node, the
               node's config as the run config, `round` as the x-axis); its id is kept in
               OUT/wandb-run-id so a resumed node continues the same run. `metrics.wandb_mode:
               offline` writes under OUT/wandb with no network (`wandb sync` uploads later).
"""

from __future__ import annotations

import math
import secrets
from pathlib import Path
from typing import Any, Protocol

SKIP = {"round", "time"}


class TrackingError(RuntimeError):
    """A tracker that cannot start (package missing, wandb refusing to init): one line for the user."""


class Tracker(Protocol):
    def log(self, round_: int, scalars: dict[str, float], walltime: float | None) -> None: ...
    def close(self) -> None: ...


def scalars_of(m: dict[str, Any]) -> dict[str, float]:
    """The numeric fields of one metrics line (module docstring)."""
    out: dict[str, float] = {}
    for key, value in m.items():
        if key in SKIP:
            continue
        if isinstance(value, dict):
            for sub, v in value.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[f"{key}/{sub}"] = float(v)
        elif isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
            out[key] = float(value)
    return out


class TensorBoardTracker:
    def __init__(self, log_dir: Path, run_config: dict[str, Any] | None = None):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise TrackingError("metrics.report_to has tensorboard: pip install 'rlswarm-node[tensorboard]'") from None
        self.log_dir = Path(log_dir)
        self.writer = SummaryWriter(log_dir=str(self.log_dir))
        if run_config is not None:
            import yaml

            text = yaml.safe_dump(run_config, sort_keys=False)
            self.writer.add_text("config", "    " + text.replace("\n", "\n    "), 0)  # markdown code block

    def log(self, round_: int, scalars: dict[str, float], walltime: float | None) -> None:
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, global_step=round_, walltime=walltime)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    def __init__(self, out_dir: Path, name: str, project: str, mode: str | None, run_config: dict[str, Any] | None):
        try:
            import wandb
        except ImportError:
            raise TrackingError("metrics.report_to has wandb: pip install 'rlswarm-node[wandb]'") from None
        id_file = Path(out_dir) / "wandb-run-id"
        run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(6)
        try:
            self.run = wandb.init(project=project, name=name, id=run_id, resume="allow", dir=str(out_dir),
                                  mode=mode, config=run_config, settings=wandb.Settings(console="off", silent=True))
        except Exception as exc:  # not logged in, bad project name, …: wandb's own message
            raise TrackingError(f"wandb could not start a run: {exc}".splitlines()[0]) from None
        id_file.write_text(run_id + "\n")
        self.run.define_metric("round")
        self.run.define_metric("*", step_metric="round")

    def log(self, round_: int, scalars: dict[str, float], walltime: float | None) -> None:
        self.run.log({**scalars, "round": round_})

    def close(self) -> None:
        self.run.finish()


def build_trackers(cfg, out_dir: Path, name: str, run_config: dict[str, Any] | None) -> list[Tracker]:
    """The trackers named in `cfg.report_to` (a MetricsConfig)."""
    trackers: list[Tracker] = []
    try:
        for kind in cfg.report_to:
            if kind == "tensorboard":
                trackers.append(TensorBoardTracker(Path(cfg.tensorboard_dir or out_dir / "tensorboard"), run_config))
            elif kind == "wandb":
                trackers.append(WandbTracker(out_dir, name, cfg.wandb_project, cfg.wandb_mode, run_config))
    except BaseException:
        for t in trackers:
            t.close()
        raise
    return trackers
