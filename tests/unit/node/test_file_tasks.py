"""Dataset files of the user's own: formats, content hash, regeneration, reward calls, drops, errors."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from node.config import ConfigError, parse_config
from node.tasks.config import DatasetError, FileDatasetSpec, TaskConfig
from node.tasks.files import FileDataset, content_hash, read_rows
from node.tasks.source import TaskError, TaskSource
from protocols.records import TaskRef

ROWS = [{"prompt": f"What is {a} + {a}?", "answer": str(2 * a), "level": a % 3} for a in range(20)]
REWARD = textwrap.dedent('''
    CALLS = []

    def exact(prompts, completions, answer, **kwargs):
        CALLS.append({"prompts": prompts, "completions": completions, "answer": answer, **kwargs})
        return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer)]

    def chat(prompts, completions, **kwargs):
        return [float(len(c[0]["content"])) for c in completions]

    def broken(prompts, completions, **kwargs):
        if completions and completions[0] == "boom":
            raise RuntimeError("boom")
        return [0.5] * len(completions)

    def wrong_signature(completion):
        return [0.0]
''')


@pytest.fixture
def files(tmp_path) -> Path:
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "reward.py").write_text(REWARD)
    return tmp_path


def spec(files: Path, **kw) -> FileDatasetSpec:
    return FileDatasetSpec(**{"file": str(files / "data.jsonl"), "reward": f"{files / 'reward.py'}:exact", **kw})


def test_jsonl_parquet_and_a_datasets_folder_give_the_same_rows(files):
    pq = pytest.importorskip("pyarrow.parquet")
    datasets = pytest.importorskip("datasets")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(ROWS), files / "data.parquet")
    datasets.Dataset.from_list(ROWS).save_to_disk(str(files / "folder"))
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS), "test": datasets.Dataset.from_list(ROWS[:2])}
                         ).save_to_disk(str(files / "dict"))
    assert read_rows(files / "data.jsonl") == read_rows(files / "data.parquet") == read_rows(files / "folder") == ROWS
    assert read_rows(files / "dict", "test") == ROWS[:2]
    with pytest.raises(DatasetError, match="choose one with `split:`"):
        read_rows(files / "dict")
    ds = FileDataset(spec(files, file=str(files / "folder")))
    assert ds.task(3).question == ROWS[3]["prompt"] and ds.sha256 == content_hash(files / "folder")


def test_the_content_hash_names_the_bytes(files, tmp_path):
    h = content_hash(files / "data.jsonl")
    assert h == content_hash(files / "data.jsonl")
    other = tmp_path / "other.jsonl"
    other.write_text((files / "data.jsonl").read_text().replace('"2"', '"3"', 1))
    assert content_hash(other) != h
    with pytest.raises(DatasetError, match="the config expects"):
        FileDataset(spec(files, sha256="0" * 64))
    assert FileDataset(spec(files, sha256=h)).sha256 == h


def test_reward_functions_get_trls_arguments_once_per_group(files):
    ds = FileDataset(spec(files))
    module = __import__("sys").modules[ds.rewards[0].fn.__module__]
    module.CALLS.clear()
    task = ds.task(4)
    assert ds.score(task, ["8", " 8 ", "nine"]) == [1.0, 1.0, 0.0]
    (call,) = module.CALLS
    assert call == {"prompts": [ROWS[4]["prompt"]] * 3, "completions": ["8", " 8 ", "nine"],
                    "answer": ["8"] * 3, "level": [1] * 3}


def test_several_rewards_are_weighted_and_a_failing_one_gives_zero(files, caplog):
    ds = FileDataset(spec(files, reward=[f"{files / 'reward.py'}:exact", f"{files / 'reward.py'}:broken"],
                          reward_weights=[1.0, 2.0]))
    task = ds.task(0)
    assert ds.score(task, ["0", "x"]) == [2.0, 1.0]
    assert ds.score(task, ["boom", "0"]) == [0.0, 1.0]  # broken raised: its share is 0 for the group
    assert "failed" in caplog.text


def test_chat_message_prompts(files, tmp_path, tiny_qwen):
    rows = [{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]}]
    (tmp_path / "chat.jsonl").write_text(json.dumps(rows[0]) + "\n")
    ds = FileDataset(FileDatasetSpec(file=str(tmp_path / "chat.jsonl"), reward=f"{files / 'reward.py'}:chat"))
    task = ds.task(0)
    assert task.question == "Say hi" and ds.score(task, ["abc"]) == [3.0]
    from node.tasks.source import render_prompt

    text = render_prompt(tiny_qwen.tokenizer, task.question, "ignored: the row has one", task.messages)
    assert "Be brief." in text and "Say hi" in text and "ignored" not in text


def test_sampling_holdout_and_peer_refs(files):
    source = TaskSource(TaskConfig(datasets=[spec(files, holdout=5)], eval_size=10, seed=1))
    ds = source.files.by_name["data"]
    held = set(ds.order.held_out)
    train = [t.ref.index for r in range(3) for t in source.sample(r, 5)]  # exactly one epoch of 15 rows
    assert sorted(train) == sorted(set(range(20)) - held)
    assert [t.ref.index for t in source.eval_set()] == sorted(held)  # the file holds 5 items, not 10
    ref = source.sample(0, 1)[0].ref
    assert ref.dataset == "file:data" and ref.config == {"sha256": ds.sha256}
    assert source.check_external(ref).question == ROWS[ref.index]["prompt"]
    for bad, reason in ((TaskRef("file:data", {"sha256": "f" * 64}, 0, 1), "dataset_mismatch"),
                        (TaskRef("file:data", {"sha256": ds.sha256}, 0, 20), "bad_task"),
                        (TaskRef("file:data", {"sha256": ds.sha256, "x": 1}, 0, 1), "bad_task"),
                        (TaskRef("file:data", {"sha256": ds.sha256}, 0, min(held)), "held_out")):
        with pytest.raises(TaskError) as e:
            source.check_external(bad)
        assert e.value.reason == reason
    # a node without the file (reasoning-gym only) drops file tasks the same way
    gym = TaskSource(TaskConfig(datasets=[{"name": "chain_sum"}]))
    with pytest.raises(TaskError) as e:
        gym.check_external(ref)
    assert e.value.reason == "dataset_mismatch"


def test_user_errors_are_one_line(files, tmp_path):
    with pytest.raises(ConfigError, match="no such dataset file"):
        parse_config({"model": {"spec": "tiny-qwen2"},
                      "tasks": {"datasets": [{"file": str(tmp_path / "nope.jsonl"), "reward": "m:f"}]}})
    with pytest.raises(DatasetError, match="wrong_signature failed on row 0"):
        FileDataset(spec(files, reward=f"{files / 'reward.py'}:wrong_signature"))
    (tmp_path / "bad.jsonl").write_text('{"question": "no prompt column"}\n')
    with pytest.raises(DatasetError, match="column 'prompt'"):
        FileDataset(spec(files, file=str(tmp_path / "bad.jsonl")))
    from losses.plugin import PluginError

    with pytest.raises(PluginError, match="has no attribute 'nope'"):
        FileDataset(spec(files, reward=f"{files / 'reward.py'}:nope"))
