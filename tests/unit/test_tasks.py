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


def test_extract_takes_the_last_tag():
    assert extract("<answer>1</answer> no, <answer> 2 </answer>") == "2"
    assert extract("nothing here") is None
    assert extract("a\n\n b \n", "lenient") == "b"


def test_bad_config_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown reasoning-gym dataset"):
        DatasetSpec(name="nope")
    with pytest.raises(ValueError, match="bad config for dataset 'chain_sum'"):
        TaskConfig(datasets=[DatasetSpec(name="chain_sum", config={"min_terms": 5, "max_terms": 2})])
