"""Finding 2: verifying a completion takes time linear in its length, with reasoning-gym's answers.

reasoning-gym's `extract_answer` regex `<answer>\\s?(.*?)\\s?</answer>` backtracks quadratically on
an opening tag repeated with no closing tag: 8k characters 0.12 s, 32k 2.6 s, 128k 42 s per
completion, and the text cap is 2^20 characters. The node now extracts in one pass; these tests
hold it to reasoning-gym's result on normal and random completions and to a time bound on
hostile ones.
"""

from __future__ import annotations

import random
import time

import pytest
from reasoning_gym.utils import extract_answer

from tests.adversarial.hostile import task_source

PIECES = ["<answer>", "</answer>", "<answer", "answer>", "</", "<", ">", " ", "\n", "\t", "\xa0", "\u2028",
          "\x1c", "\x85", "a", "42", "x y", "<answer> ", " </answer>", "  ", "\r\n"]


@pytest.fixture(scope="module")
def tasks():
    return task_source()


def test_same_answers_as_reasoning_gym_on_normal_completions(tasks):
    rng = random.Random(2)
    items = tasks.sample(0, 200)
    for t in items:
        for text in (f"<answer>{t.answer}</answer>", f"Let me add.\n<answer> {t.answer} </answer>",
                     f"<think>{t.question}</think>\n<answer>\n{t.answer}\n</answer>",
                     f"<answer>1</answer> no wait <answer>{t.answer}</answer>", f"The answer is {t.answer}.",
                     f"<answer>{t.answer}", f"<answer><answer>{t.answer}</answer></answer>",
                     f"{rng.choice(PIECES)}<answer>{t.answer}</answer>{rng.choice(PIECES)}"):
            assert tasks.extract(text) == extract_answer(text), text
            assert tasks.score(t, text) == tasks.score(t, text)


def test_same_answers_as_reasoning_gym_on_random_tag_soup(tasks):
    rng = random.Random(7)
    for _ in range(30_000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12)))
        assert tasks.extract(text) == extract_answer(text), repr(text)


@pytest.mark.parametrize("text", ["<answer>" * 16384, "<answer>" + " " * (1 << 17), "<answer>\n" * 14563,
                                  "</answer><answer>" * 7710 + "<answer>"])
def test_hostile_completion_verifies_in_milliseconds(tasks, text):
    task = tasks.sample(0, 1)[0]
    started = time.thread_time()  # this thread's CPU time: the work, not the machine's load
    assert tasks.score(task, text) == 0.0
    seconds = time.thread_time() - started
    assert seconds < 0.5, f"{len(text)} characters took {seconds:.2f} s"


def test_an_overlong_answer_never_reaches_the_dataset_verifier(tasks, monkeypatch):
    task = tasks.sample(0, 1)[0]
    import node.tasks.source as source

    calls = []
    real = source.build_dataset

    def spy(*a, **kw):
        calls.append(a)
        return real(*a, **kw)

    monkeypatch.setattr(source, "build_dataset", spy)
    assert tasks.score(task, f"<answer>{task.answer}</answer>") == 1.0 and calls
    calls.clear()
    assert tasks.score(task, "<answer>" + "1" * 100_000 + "</answer>") == 0.0 and not calls
