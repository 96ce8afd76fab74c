"""The round record (node/round/record.py): its line reads back, old lines read, each step metric combines over
micro-batches as its field declares, docs/ROUNDS.md is current, and the product reads round fields, not strings."""

from __future__ import annotations

import ast
import copy
import json
from dataclasses import fields
from pathlib import Path

import pytest
import torch

from losses import build_loss
from losses.base import LossOutputs
from losses.imitation import with_imitation
from losses.peer_floor import with_peer_floor
from losses.registry import LOSS_FUNCTIONS
from node.round import record as R
from node.round.config import TrainConfig
from node.round.record import Over, RoundRecord, over_of, read_records
from node.round.train import build_rows, micro_batches, train_step
from tests.unit.losses.test_losses_values import LOGP, batch
from tests.unit.node.test_node_train import _generate, _groups, _prompt

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("node", "swarm", "ops", "losses")
# dicts of another kind whose keys happen to share a round field's name (checked by hand: not a round's line)
NOT_A_ROUND = {("node/books/checkpoint.py", "policy_version"),  # a checkpoint's state
               ("ops/export.py", "policy_version"), ("ops/cli/main.py", "policy_version"),  # an export's metadata
               ("ops/dashboard/state.py", "drops")}  # the dashboard's per-peer row


def round_keys() -> set[str]:
    keys = {"policy_version", "round_s"}
    for cls in (*R.SECTIONS.values(), R.StepMetrics, R.Distill):
        keys |= {f.name for f in fields(cls)} - {"metrics", "other"}
    return keys


def string_reads(path: Path, keys: set[str]) -> list[tuple[int, str]]:
    """Where `path` reads one of `keys` by string: x["k"], x.get("k"), "k" in x."""
    out = []
    for n in ast.walk(ast.parse(path.read_text())):
        key = None
        if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and isinstance(n.slice, ast.Constant):
            key = n.slice.value
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("get", "pop") \
                and n.args and isinstance(n.args[0], ast.Constant):
            key = n.args[0].value
        elif isinstance(n, ast.Compare) and isinstance(n.left, ast.Constant) \
                and any(isinstance(o, (ast.In, ast.NotIn)) for o in n.ops):
            key = n.left.value
        if isinstance(key, str) and key in keys:
            out.append((n.lineno, key))
    return out


def test_the_product_reads_round_fields_not_strings():
    keys, bad = round_keys(), []
    for pkg in PRODUCT:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel == "node/round/record.py":
                continue
            bad += [f"{rel}:{line} {key}" for line, key in string_reads(path, keys) if (rel, key) not in NOT_A_ROUND]
    assert not bad, f"round fields read by string outside node/round/record.py: {bad}"


def test_the_guard_sees_a_string_read(tmp_path):
    f = tmp_path / "x.py"
    f.write_text('m = {}\nm["groups_external"] = 1\nprint(m["groups_external"], m.get("reward_mean"), "kl_old" in m)\n')
    assert string_reads(f, round_keys()) == [(3, "groups_external"), (3, "reward_mean"), (3, "kl_old")]


def _record() -> RoundRecord:
    return RoundRecord(
        node="n0", round=3, policy_version=3, round_s=1.5, time=100.0,
        generation=R.Generation(reward_mean=0.5, accuracy=0.25, tokens_generated=64, gen_s=2.0, tokens_per_s=32.0),
        step=R.Step(groups_local=4, groups_external=2, external_peers=["p"], rows_trained=48, tokens_trained=400,
                    metrics=R.step_metrics({"loss": 0.1, "is_weight_max": 2.0, "kl_beh_external": 0.01, "mine": 3.0})),
        exchange=R.Exchange(groups_received=4, drops={"stale_age": 1}, gossip={"received": 2}),
        peers=R.Peers(peers_seen=1, peers_good=1, peer_stats={"p": {"model": "m", "received": 4, "used": 2}}),
        eval=R.Eval(eval_accuracy=0.4, eval_se=0.05, eval_size=100),
        distill=R.Distill(distill_teacher="t", distill_requests=2, distill_answers=2),
        mode={"public": True})


def test_a_line_reads_back_to_the_same_record():
    rec = _record()
    line = json.loads(json.dumps(rec.line()))
    assert line["groups_external"] == 2 and line["mine"] == 3.0 and line["public"] is True
    assert "kl_beh_local" not in line  # sparse: a metric the loss did not report is not in the line
    assert line["distill_drops"] is None and "distill_served" not in line  # the student part whole, no teacher part
    back = RoundRecord.from_line(line)
    assert back.line() == line
    # a plugin's metric reads back among the undeclared fields (a line cannot tell it from a mode's); the rest is equal
    assert back.mode == {"public": True, "mine": 3.0} and back.metrics.other == {}
    back.mode.pop("mine")
    back.step.metrics.other["mine"] = 3.0
    assert back == rec


def test_an_older_line_reads_with_defaults_and_keeps_what_it_does_not_know(tmp_path):
    old = {"node": "lab-0", "round": 0, "reward_mean": 0.3, "groups_local": 4, "groups_external": 0,
           "external_peers": ["QmA"], "loss": 0.2, "time": 5.0, "start": "fresh", "some_future_field": 1}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(old) + "\n" + json.dumps({**old, "reward_mean": 0.4}) + "\n")
    (rec,) = read_records(tmp_path / "metrics.jsonl")  # a resumed run's second line of round 0 supersedes
    assert rec.generation.reward_mean == 0.4 and rec.metrics.loss == 0.2 and rec.step.external_peers == ["QmA"]
    assert rec.peers.peer_stats is None and rec.distill is None and rec.eval.eval_accuracy is None
    assert rec.mode == {"start": "fresh", "some_future_field": 1}
    assert rec.line()["some_future_field"] == 1


def test_every_step_metric_declares_how_it_combines():
    for f in fields(R.StepMetrics):
        if f.name != "other":
            assert isinstance(f.metadata["over"], Over), f.name
    assert over_of("is_weight_max") is Over.MAX and over_of("kl_beh_external") is Over.PEER_ROWS
    assert over_of("is_weight_extreme") is Over.SUM and over_of("tokens") is Over.STEP
    assert over_of("plugin_peak", {"plugin_peak": "max"}) is Over.MAX and over_of("plugin_other") is Over.ROWS


@pytest.mark.parametrize("name", sorted(LOSS_FUNCTIONS))
def test_every_metric_a_built_in_loss_reports_is_declared(name):
    """A metric the record did not declare would combine as a row mean whatever it is (a max, a count)."""
    losses = [build_loss(name), with_imitation(with_peer_floor(build_loss(name), 0.01), 1.0, rows="all")]
    if name == "grpo":
        losses.append(build_loss("grpo", beta=0.1))
    for loss in losses:
        out = loss(batch(ref=LOGP))
        assert set(out.metrics) <= set(R.STEP_OVER), set(out.metrics) - set(R.STEP_OVER)


def test_the_schema_document_is_current():
    assert (ROOT / "docs" / "ROUNDS.md").read_text() == R.schema(), \
        "docs/ROUNDS.md is stale: python -m node.round.record > docs/ROUNDS.md"


class _Counting:
    """A loss that reports its micro-batch's rows three ways: as a mean, a maximum and a count (combine)."""

    def __init__(self):
        self.base = build_loss("grpo")

    def __call__(self, inputs):
        out = self.base(inputs)
        rows = float(inputs.logp.shape[0])
        return LossOutputs(out.loss, {**out.metrics, "mb_rows_mean": rows, "mb_rows_max": rows, "mb_rows_sum": rows},
                           {"mb_rows_max": "max", "mb_rows_sum": "sum"})


@pytest.mark.parametrize("micro", [8, 100])  # 12 rows in groups of 4: micro-batches of 8 and 4, or one
def test_a_plugin_metric_combines_as_its_loss_declares(tiny_qwen, micro):
    tasks, res = _generate(tiny_qwen, 1.0)
    rows = build_rows(_groups(tiny_qwen, tasks, res), tiny_qwen.tokenizer, _prompt(tiny_qwen))
    lm = copy.deepcopy(tiny_qwen)
    step = train_step(lm.model, torch.optim.SGD(lm.model.parameters(), lr=0.0), rows, _Counting(),
                      TrainConfig(micro_batch_rows=micro, grad_clip=1e6), temperature=1.0,
                      pad_id=lm.tokenizer.pad_token_id)
    n = len(rows)
    sizes = [len(mb) for mb in micro_batches(rows, micro)]
    assert (len(sizes) > 1) == (micro < n)  # the small size splits the step (whole groups per micro-batch)
    other = step.metrics.other
    assert other["mb_rows_sum"] == n  # a count: the micro-batches add up
    assert other["mb_rows_max"] == max(sizes)
    assert other["mb_rows_mean"] == pytest.approx(sum(s * s for s in sizes) / n)  # weighted by each one's rows
