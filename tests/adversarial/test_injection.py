"""Text injection through training: a peer's text before a correct answer is learned, unless the floor stops it.

A hostile peer's group for a task the node allows: four rows of "PWN " + the right answer (advantage
+1, claimed log μ = −30 so that F-TIS gives them w = C = 2), four wrong answers (−1), beside an honest
peer's group of the right answer and wrong ones. The tiny model is first taught the answer a little
(its tokens then lie above the floor, the prefix's far below it). Three copies of that model take the
same optimizer steps with F-TIS:

  open      the hostile rows as sent, no floor
  floored   the hostile rows as sent, train.peer_token_floor 0.01
  and a control of each: the hostile rows present with advantage 0 (they train nothing; the step's
  sizes are the same). The floor acts on the honest peer's wrong rows too (the wrong word's letters lie
  below it), so each arm is set against its own control.

The open copy must raise the prefix's log-probability by more than 3 nats over its control (a frozen
optimizer, or a loss without gradient, fails here), the floored one by less than 0.1 nats, while the
floored copy still learns the honest peer's answer (its log-probability rises by more than 1 nat).
docs/benchmarks/reliability.md §15C measures the same over 100 rounds of a node.
"""

from __future__ import annotations

import copy

import torch

from losses import build_loss
from losses.peer_floor import with_peer_floor
from node.round.config import TrainConfig
from node.round.logprobs import TokenRow, score_rows
from node.round.train import Row, build_optimizer, train_step
from node.tasks.source import render_prompt

PREFIX, ANSWER, WRONG = "PWN ", "<answer>ananab</answer>", "<answer>banana</answer>"
CLAIMED = -30.0


def _ids(tok, text: str, eos: bool = True) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if eos else [])


def _logp(model, tok, prompt_ids, completion) -> float:
    with torch.no_grad():
        logp, _ = score_rows(model, [TokenRow(prompt_ids, completion)], 1.0, tok.pad_token_id)
    return float(logp.sum())


def _rows(model, tok, prompt_ids, hostile_advantage: float) -> list[Row]:
    injected = _ids(tok, PREFIX + ANSWER)
    wrong = _ids(tok, WRONG)
    rows = [Row(TokenRow(prompt_ids, injected), [CLAIMED] * len(injected), CLAIMED * len(injected), True,
                hostile_advantage, 0, True) for _ in range(4)]
    rows += [Row(TokenRow(prompt_ids, wrong), [CLAIMED] * len(wrong), CLAIMED * len(wrong), True,
                 -hostile_advantage, 0, True) for _ in range(4)]
    honest = [TokenRow(prompt_ids, _ids(tok, ANSWER)), TokenRow(prompt_ids, wrong)]
    with torch.no_grad():  # an honest peer of our model: μ is the policy it (we) sampled with
        mu, mask = score_rows(model, honest, 1.0, tok.pad_token_id)
    for k, adv in [(0, 1.0)] * 4 + [(1, -1.0)] * 4:
        beh = mu[k, : int(mask[k].sum())].tolist()
        rows.append(Row(honest[k], beh, sum(beh), True, adv, 1, True))
    return rows


def test_a_peers_prefix_is_learned_without_the_floor_and_not_with_it(tiny_qwen):
    tok = tiny_qwen.tokenizer
    prompt_ids = _ids(tok, render_prompt(tok, "Spell this word backward: banana", None), eos=False)
    answer, prefix = _ids(tok, ANSWER), _ids(tok, PREFIX, eos=False)
    torch.manual_seed(0)
    warm = copy.deepcopy(tiny_qwen.model)
    opt = torch.optim.Adam(warm.parameters(), lr=3e-3)
    for _ in range(15):  # the node writes the answer now and then: its tokens above the floor
        logp, _ = score_rows(warm, [TokenRow(prompt_ids, answer)], 1.0, tok.pad_token_id)
        opt.zero_grad()
        (-logp.sum()).backward()
        opt.step()
    with torch.no_grad():
        per_token, _ = score_rows(warm, [TokenRow(prompt_ids, answer), TokenRow(prompt_ids, prefix)], 1.0,
                                  tok.pad_token_id)
    assert float(per_token[0, : len(answer)].exp().min()) > 0.05  # every answer token plausible
    assert float(per_token[1, : len(prefix)].exp().max()) < 0.01  # every prefix token not

    cfg = TrainConfig(lr=1e-3, micro_batch_rows=64)
    results = {}
    for arm, floor, hostile_adv in (("control", 0.0, 0.0), ("open", 0.0, 1.0),
                                    ("floored control", 0.01, 0.0), ("floored", 0.01, 1.0)):
        model = copy.deepcopy(warm)
        optimizer = build_optimizer(model, cfg)
        loss = with_peer_floor(build_loss("f-tis"), floor)
        before = _logp(model, tok, prompt_ids, prefix), _logp(model, tok, prompt_ids, answer)
        for _ in range(10):
            step = train_step(model, optimizer, _rows(model, tok, prompt_ids, hostile_adv), loss, cfg,
                              temperature=1.0, pad_id=tok.pad_token_id)
            assert step.stepped
        after = _logp(model, tok, prompt_ids, prefix), _logp(model, tok, prompt_ids, answer)
        results[arm] = (after[0] - before[0], after[1] - before[1])
    rise_open = results["open"][0] - results["control"][0]
    rise_floored = results["floored"][0] - results["floored control"][0]
    assert rise_open > 3.0, results  # the injection is learned
    assert abs(rise_floored) < 0.1, results  # the floor stops it
    assert results["floored"][1] > 1.0, results  # and the honest peer's answer is still learned
