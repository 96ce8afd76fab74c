"""One round of a node, in the order of DESIGN §3. Start reading here.

    1. tasks      sample B verifiable tasks, render prompts with our chat template
    2. generate   G completions per prompt, with per-token sampling logprobs μ
    3. verify     rewards from our verifier, advantages within each group
    4. publish    our groups go to the swarm (if one is configured)
    5. gather     peers' groups: regenerated, re-verified, advantages recomputed here
    6. select     SAPO: I local + J external informative groups
    7. score      π_θ on every selected completion, in our tokenization
    8. step       pluggable loss, micro-batches, one optimizer step
    9. sync       new weights into the generator
   10. average    (federated mode) every τ rounds: LoRA adapters averaged with peers
   11. record     metrics line, held-out eval when due, checkpoint when due

Federated mode (node/federated.py) changes three steps: tasks come from the client's private
set, and private rounds neither publish nor gather (1, 4, 5); on a PubSwap public step the
prompts are the shared public ones and the groups are built by the Balanced/Random rule (6);
every τ rounds the adapters are averaged (10).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from node.federated import build_public_groups
from node.groups import Group, verify_group
from node.ingest import ingest
from node.node import Node
from node.records import to_records
from node.select import Selection
from node.train import build_optimizer, build_rows, train_step


def run_round(node: Node, round_: int) -> dict[str, Any]:
    started = time.perf_counter()
    cfg = node.cfg

    fed = node.federated  # None outside federated mode
    public = fed is not None and fed.public_round(round_)
    shares = fed is None or public  # a federated private round never leaves the node
    tasks = sample_tasks(node, round_, public)  # 1
    prompts = [node.prompt_of(t) for t in tasks]
    gen = node.generator.generate(prompts, n=cfg.generation.group_size)  # 2
    # the version of the weights that actually sampled (vLLM may lag by up to sync_every − 1 steps)
    sampled_by = node.policy_version if gen.policy_version is None else gen.policy_version
    local = [
        verify_group(node.tasks, t, comps, mode=cfg.train.advantage,  # 3
                     round=round_, policy_version=sampled_by)
        for t, comps in zip(tasks, gen.groups)
    ]
    wire_bytes = publish(node, round_, local, prompts) if shares else 0  # 4
    received, drops, gather_s = gather(node, round_) if shares else ([], {}, None)  # 5
    selection, pubswap = select(node, round_, local, received, drops, public)  # 6
    rows = build_rows(selection.groups, node.tokenizer, node.prompt_of)  # 7
    step = train_step(node.model, node.optimizer, rows, node.loss_fn, cfg.train,  # 8
                      temperature=cfg.generation.temperature, pad_id=node.tokenizer.pad_token_id,
                      token_weighted=getattr(cfg.loss, "norm", "seq") == "token",
                      regularizer=fed.proximal() if fed else None)  # FedProx term
    if step.stepped:
        node.policy_version += 1
        node.generator.sync_weights(node.model, node.policy_version)  # 9
    averaging = average(node, round_, step.rows) if fed else {}  # 10

    eval_accuracy = node.evaluate() if node.eval_due(round_) else None  # 11
    metrics = round_metrics(node, round_, local, selection, step, gen, wire_bytes,
                            received, drops, gather_s, eval_accuracy, time.perf_counter() - started)
    if fed is not None:
        metrics.update(public=public, **pubswap, **averaging)
    node.log.write(metrics)
    if node.checkpoint_due(round_):
        node.save_checkpoint(round_)
    return metrics


def sample_tasks(node: Node, round_: int, public: bool) -> list:
    n = node.cfg.generation.prompts_per_round
    return node.tasks.public(round_, n) if public else node.tasks.sample(round_, n)


def select(node: Node, round_: int, local: list[Group], received: list[Group], drops: dict[str, int],
           public: bool) -> tuple[Selection, dict[str, int]]:
    """SAPO's I local + J external groups; on a PubSwap public step, the Balanced/Random groups
    (peers' groups that are not this round's public prompts count as drops)."""
    if public:
        cfg = node.cfg
        selection, stats = build_public_groups(local, received, cfg.federated, own_id=node.peer_id, round_=round_,
                                               rng=node.selector.rng, mode=cfg.train.advantage,
                                               drop_zero_advantage=cfg.select.drop_zero_advantage)
        for key in [k for k in stats if k.startswith("pubswap_drop_")]:
            drops[key.removeprefix("pubswap_drop_")] = drops.get(key.removeprefix("pubswap_drop_"), 0) + stats.pop(key)
        return selection, stats
    node.selector.add_external(received)
    return node.selector.select(local), {}


def average(node: Node, round_: int, rows: int) -> dict[str, Any]:
    """Every τ rounds: FedIT averaging; a changed adapter gets a fresh optimizer and a new version."""
    fed = node.federated
    fed.samples += rows
    if not fed.average_due(round_):
        return {}
    out = fed.average()
    if out["avg_averaged"]:
        node.optimizer = build_optimizer(node.model, node.cfg.train)  # state reset, as the paper
        node.policy_version += 1
        node.generator.sync_weights(node.model, node.policy_version)
    return out


def publish(node: Node, round_: int, local: list[Group], prompts: list[str]) -> int:
    if node.transport is None:
        return 0
    return node.transport.publish(round_, to_records(node, round_, local, prompts))


def gather(node: Node, round_: int) -> tuple[list[Group], dict[str, int], float | None]:
    """Peers' groups for this round (bounded wait) and late ones from the staleness window."""
    if node.transport is None:
        return [], {}, None
    sw = node.cfg.swarm
    now = node.transport.gather([round_], timeout=sw.gather_timeout_s, min_peers=sw.gather_min_peers)
    window = range(max(0, round_ - node.cfg.ingest.max_staleness_rounds), round_)
    late = node.transport.gather(list(window), timeout=0.0, min_peers=0) if len(window) else None
    records = now.records + (late.records if late else [])
    drops = now.drops + (late.drops if late else type(now.drops)())
    result = ingest(records, tasks=node.tasks, cfg=node.cfg.ingest, round_=round_,
                    own_fingerprint=node.fingerprint, own_vocab_size=node.vocab_size,
                    advantage_mode=node.cfg.train.advantage)
    drops.update(result.drops)
    node.selector.prune(lambda g: round_ - g.round <= node.cfg.ingest.max_staleness_rounds)
    return result.groups, dict(drops), now.latency_s


def round_metrics(node, round_, local, selection, step, gen, wire_bytes, received, drops,
                  gather_s, eval_accuracy, round_s) -> dict[str, Any]:
    rewards = [r for g in local for r in g.rewards]
    return {
        "node": node.cfg.name,
        "round": round_,
        "policy_version": node.policy_version,
        "reward_mean": statistics.fmean(rewards),
        "accuracy": sum(r >= 1.0 for r in rewards) / len(rewards),
        "eval_accuracy": eval_accuracy,
        "eval_accuracy_before": node.eval_before if round_ == 0 else None,
        "groups_local": selection.local,
        "groups_external": selection.external,
        "groups_published": len(local) if node.transport is not None else 0,
        "groups_received": len(received),
        "groups_zero_adv": selection.dropped_zero_adv,
        "external_peers": sorted({g.source for g in selection.groups if g.is_external}),
        "rows_trained": step.rows,
        "rows_dash_filtered": step.rows_filtered,
        "completion_len_mean": statistics.fmean(len(c.token_ids) for g in local for c in g.completions),
        "gen_s": gen.seconds,
        "tokens_per_s": gen.new_tokens / max(gen.seconds, 1e-9),
        "step_s": step.seconds,
        "round_s": round_s,
        "gather_s": gather_s,
        "wire_bytes": wire_bytes,
        "drops": drops,
        "time": time.time(),
        **step.metrics,
    }


def run(node: Node, rounds: int) -> list[dict[str, Any]]:
    """Run rounds start..rounds-1 (resuming after the last checkpointed round)."""
    out = []
    if node.next_round == 0 and node.cfg.eval.at_start and node.cfg.eval.every:
        node.eval_before = node.evaluate()
    for round_ in range(node.next_round, rounds):
        out.append(run_round(node, round_))
        node.next_round = round_ + 1
    return out
