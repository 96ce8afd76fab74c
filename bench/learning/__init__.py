"""Does a node learn, and does sharing help? Training runs on lab models, paired by seed (results in
bench/results/learning/).

    sapo              I own + J peers' groups per step, SAPO's experiment on the lab model
    sharing           a swarm node against a node alone at equal compute, by arm (R: alone, replaying its own
                      groups to the swarm node's trained tokens)
    sharing_report    sharing's paired differences, decision rules and figure
    teacher           a student with a frozen, trained teacher's groups against the same student alone
    split_bias        whether a distillation student is paid for splitting a text otherwise than its tokenizer
    hetero            a node beside a peer that is a different model, against solo runs
    heterorl          GEPO against GRPO and sequence-level IS under delay (learner and samplers)
    learning_margin   RL on the lab model against the same model frozen: the held-out gain
    fis_ablation      learning from another policy's groups, NoIS vs F-TIS; IS-weight variance by policy gap
    federated         FedAvg-GRPO against PubSwap-Balanced on a small CPU federation
    demo_seeds        the demo (`make demo`) over several seeds, node 0 against its solo control
    plausibility      what train.peer_token_floor would take from an honest peer's rows
"""
