"""Tasks: exact regeneration from a TaskRef, allow-lists, answer extraction, verifier rewards."""

import pytest

from node.tasks.config import DatasetSpec, TaskConfig
from node.tasks.source import TaskError, TaskSource, extract, regenerate, score
from protocols.records import TaskRef

CHAIN = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1}


def source(**kw) -> TaskSource:
    return TaskSource(TaskConfig(datasets=[DatasetSpec(name="chain_sum", config=CHAIN)], seed=3, **kw))


def test_regenerate_is_exact_and_independent_of_other_items():
    a = regenerate(TaskRef("chain_sum", dict(CHAIN), 3, 41))
    b = regenerate(TaskRef("chain_sum", dict(CHAIN), 3, 41))
    c = regenerate(TaskRef("chain_sum", dict(CHAIN), 3, 42))
    assert (a.question, a.answer) == (b.question, b.answer)
    assert a.question != c.question or a.answer != c.answer


def test_sample_is_deterministic_per_round_and_distinct_across_rounds():
    s1, s2 = source(), source()
    r0 = [t.ref for t in s1.sample(0, 4)]
    assert r0 == [t.ref for t in s2.sample(0, 4)]
    # index of item i in round r is r * n + i
    assert [t.ref.index for t in s1.sample(2, 4)] == [8, 9, 10, 11]


def test_eval_set_uses_a_disjoint_seed():
    s = source(eval_size=5)
    ev = s.eval_set()
    assert len(ev) == 5 and all(t.ref.seed != 3 for t in ev)


def test_external_allow_list():
    s = source()
    ok = s.check_external(TaskRef("chain_sum", dict(CHAIN), 99, 0))
    assert ok.question
    with pytest.raises(TaskError) as e:
        s.check_external(TaskRef("chain_sum", {"min_terms": 2}, 99, 0))
    assert e.value.reason == "task_not_allowed"
    with pytest.raises(TaskError) as e:
        s.check_external(TaskRef("no_such_dataset", {}, 0, 0))
    assert e.value.reason == "unknown_dataset"
    with pytest.raises(TaskError) as e:
        regenerate(TaskRef("chain_sum", {"bogus": 1}, 0, 0))
    assert e.value.reason == "bad_task"


def test_reward_uses_the_datasets_verifier_and_strict_tags():
    t = regenerate(TaskRef("chain_sum", dict(CHAIN), 3, 0))
    assert score(t, f"thinking... <answer>{t.answer}</answer>") == 1.0
    assert score(t, f"<answer>{int(t.answer) + 1}</answer>") == 0.0
    assert score(t, t.answer) == 0.0  # strict: no tags, no reward
    assert score(t, f"so the sum is\n{t.answer}", "lenient") == 1.0
    assert score(t, f"{t.answer} is what the terms add up to", "number") == 1.0


def test_extract_takes_the_last_tag():
    assert extract("<answer>1</answer> no, <answer> 2 </answer>") == "2"
    assert extract("nothing here") is None
    assert extract("a\n\n b \n", "lenient") == "b"
    assert extract("4 + 5 = 9.", "number") == "9" and extract("-3 and 2.50 then -7", "number") == "-7"
    assert extract("x <answer>12</answer> 13", "number") == "12" and extract("no digits", "number") is None


def test_bad_config_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown reasoning-gym dataset"):
        DatasetSpec(name="nope")
    with pytest.raises(ValueError, match="bad config for dataset 'chain_sum'"):
        TaskConfig(datasets=[DatasetSpec(name="chain_sum", config={"min_terms": 5, "max_terms": 2})])


SPELL = [{"min_word_len": 3, "max_word_len": 4}, {"min_word_len": 7, "max_word_len": 8}]


def spell_source(**kw) -> TaskSource:
    return TaskSource(TaskConfig(datasets=[DatasetSpec(name="spell_backward", config=c) for c in SPELL], **kw))


def test_exact_reward_is_binary_where_partial_gives_credit_per_letter():
    partial, exact = spell_source(), spell_source(reward="exact")
    task = regenerate(TaskRef("spell_backward", dict(SPELL[1]), 5, 0))
    near = task.answer[:-1] + ("a" if task.answer[-1] != "a" else "b")  # one letter wrong
    [p_near, p_right] = partial.score_group(task, [f"<answer>{near}</answer>", f"<answer>{task.answer}</answer>"])
    assert 0.0 < p_near < 1.0 and p_right == 1.0
    assert exact.score_group(task, [f"<answer>{near}</answer>", f"<answer>{task.answer}</answer>", "x"]) == [0.0, 1.0, 0.0]


def test_eval_datasets_set_the_held_out_mix_and_its_labels():
    band = [DatasetSpec(name="spell_backward", config=SPELL[1])]
    s = TaskSource(TaskConfig(datasets=band, eval_datasets=[DatasetSpec(name="spell_backward", config=c) for c in SPELL],
                              eval_size=6))
    configs = [t.ref.config for t in s.eval_set()]
    assert configs == [SPELL[0], SPELL[1]] * 3  # both bands, alternating, though training draws only the hard one
    labels = s.eval_labels()
    assert labels[0] == "spell_backward[max_word_len=4,min_word_len=3]" and len(set(labels)) == 2
    assert all(t.ref.config == SPELL[1] for t in s.sample(0, 8))
    # peers' tasks on any band of the held-out mix are accepted by default
    assert s.check_external(TaskRef("spell_backward", dict(SPELL[0]), 99, 0)).question
    # one dataset: the label is its name
    assert source(eval_size=2).eval_labels() == ["chain_sum", "chain_sum"]


def test_eval_datasets_must_build():
    with pytest.raises(ValueError, match="bad config for dataset"):
        TaskConfig(datasets=[DatasetSpec(name="chain_sum", config=CHAIN)],
                   eval_datasets=[DatasetSpec(name="chain_sum", config={"bogus": 1})])
