"""Dataset files of the user's own: rows by index, a content hash as identity, rewards by import path.

A file task is named on the wire by the ordinary `TaskRef` (docs/PROTOCOL.md):

    dataset = "file:<name>"   config = {"sha256": <content hash>}   seed = 0   index = row index

A receiver regenerates the row from *its own copy* of the file, found by the content hash, and
scores the completions with *its own* reward functions (docs/ARCHITECTURE.md §4). A hash it does
not hold is dropped as `dataset_mismatch`, a row index out of range as `bad_task`, a row it
holds out for evaluation as `held_out`.

Formats: `.jsonl` (one JSON object per line), `.parquet` (pyarrow), or a folder written by
`datasets.Dataset.save_to_disk` (the `datasets` package; a DatasetDict needs `split:`). The
content hash is the sha256 of the file's bytes; for a folder, of every file's relative path and
sha256 in path order. Rows need the prompt column: a string, or a list of chat messages
({role, content}) — then the last message's content is the "question" a receiver checks the
sender's prompt against.

Reward functions have TRL's `reward_funcs` signature and are called once per group:

    fn(prompts=[p] * n, completions=[c_1 … c_n], **{column: [value] * n for every other column})

where `p` is the row's prompt value as stored, and `c_i` the completion text (for a chat-message
prompt, `[{"role": "assistant", "content": text}]`, as TRL passes it). TRL's `completion_ids` and
`trainer_state` are not passed: write `**kwargs`. A function returns one float (or None = 0) per
completion; several functions are summed with `reward_weights`. A function that raises, returns
the wrong count or a non-finite value gives 0 for that group and a logged warning: peers'
completions never crash a node. Each function is called once on the first row with an empty
completion when the node starts, so a wrong signature fails there, in one line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from losses.plugin import load_object
from node.tasks.config import DatasetError, FileDatasetSpec
from node.tasks.file_order import FileOrder
from node.tasks.task import Task, TaskError
from protocols.records import TaskRef

log = logging.getLogger(__name__)
PREFIX = "file:"


def is_file_ref(ref: TaskRef) -> bool:
    return ref.dataset.startswith(PREFIX)


def content_hash(path: Path) -> str:
    """sha256 of a file's bytes; of a folder: of each file's relative path and sha256, in path order."""
    if path.is_file():
        return _file_hash(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f"{f.relative_to(path).as_posix()}\0{_file_hash(f)}\n".encode())
    return h.hexdigest()


def _file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_rows(path: Path, split: str | None = None) -> list[dict[str, Any]]:
    """Every row of a .jsonl / .parquet file or a `datasets` folder, as dicts."""
    if path.is_dir():
        try:
            import datasets
        except ImportError:
            raise DatasetError(f"{path} is a folder: reading a `datasets` folder needs pip install 'rlswarm-node[data]'") from None
        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            if split is None and len(ds) != 1:
                raise DatasetError(f"{path} holds splits {sorted(ds)}: choose one with `split:`")
            ds = ds[split] if split is not None else next(iter(ds.values()))
        return [dict(r) for r in ds]
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DatasetError(f"reading {path.name} needs pyarrow: pip install 'rlswarm-node[data]'") from None
        return pq.read_table(path).to_pylist()
    if path.suffix in (".jsonl", ".json"):
        rows = []
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{path}:{i}: not JSON: {exc}") from None
                if not isinstance(row, dict):
                    raise DatasetError(f"{path}:{i}: a row must be a JSON object")
                rows.append(row)
        return rows
    raise DatasetError(f"{path}: unknown dataset format (expected .jsonl, .parquet or a `datasets` folder)")


@dataclass(frozen=True)
class _Reward:
    path: str
    fn: Any
    weight: float


class FileDataset:
    """One dataset file: its rows, hash, held-out split, and this node's reward functions for it."""

    def __init__(self, spec: FileDatasetSpec):
        path = Path(spec.file).expanduser()
        self.spec, self.name = spec, spec.name
        self.sha256 = content_hash(path)
        if spec.sha256 is not None and spec.sha256 != self.sha256:
            raise DatasetError(f"{spec.file} has sha256 {self.sha256}, the config expects {spec.sha256}")
        self.rows = read_rows(path, spec.split)
        if not self.rows:
            raise DatasetError(f"{spec.file} holds no rows")
        col = spec.prompt_column
        for i, row in enumerate(self.rows):
            if not _prompt_ok(row.get(col)):
                raise DatasetError(f"{spec.file} row {i}: column {col!r} must be a non-empty string or a list of "
                                   f"chat messages (columns: {sorted(row)})")
        if spec.holdout >= len(self.rows):
            raise DatasetError(f"{spec.file}: holdout {spec.holdout} leaves no rows to train on ({len(self.rows)} rows)")
        self.order = FileOrder(len(self.rows), self.sha256, spec.holdout)
        weights = spec.reward_weights or [1.0] * len(spec.reward)
        self.rewards = [_Reward(p, load_object(p, "reward function"), w) for p, w in zip(spec.reward, weights)]
        self._warned: set[str] = set()
        self._check_rewards()

    def ref(self, index: int) -> TaskRef:
        return TaskRef(PREFIX + self.name, {"sha256": self.sha256}, 0, index)

    def task(self, index: int) -> Task:
        row = self.rows[index]
        prompt = row[self.spec.prompt_column]
        messages = tuple(dict(m) for m in prompt) if isinstance(prompt, list) else None
        question = str(messages[-1]["content"]) if messages else prompt
        return Task(ref=self.ref(index), question=question, answer=str(row.get("answer", "")), entry=row,
                    messages=messages)

    def score(self, task: Task, completions: list[str]) -> list[float]:
        """The weighted sum of this node's reward functions for each completion (module docstring)."""
        row = task.entry
        prompt = row[self.spec.prompt_column]
        n = len(completions)
        comps: list[Any] = [[{"role": "assistant", "content": c}] for c in completions] if task.messages else list(completions)
        columns = {k: [v] * n for k, v in row.items() if k != self.spec.prompt_column}
        total = [0.0] * n
        for r in self.rewards:
            values = self._call(r, [prompt] * n, comps, columns, n)
            total = [t + r.weight * v for t, v in zip(total, values)]
        return total

    def _call(self, r: _Reward, prompts: list, comps: list, columns: dict, n: int) -> list[float]:
        try:
            values = list(r.fn(prompts=prompts, completions=comps, **columns))
            if len(values) != n:
                raise ValueError(f"returned {len(values)} rewards for {n} completions")
            out = [0.0 if v is None else float(v) for v in values]
            if not all(math.isfinite(v) for v in out):
                raise ValueError(f"returned a non-finite reward: {out}")
            return out
        except Exception as exc:  # peers' text must never crash us: 0 for the group, warn once per function
            if r.path not in self._warned:
                self._warned.add(r.path)
                log.warning("reward function %s failed (rewards 0 for that group; shown once): %s: %s",
                            r.path, type(exc).__name__, exc)
            return [0.0] * n

    def _check_rewards(self) -> None:
        """Call every reward function once (first row, empty completion): a wrong signature fails at start."""
        task = self.task(0)
        row = task.entry
        comps: list[Any] = [[{"role": "assistant", "content": ""}]] if task.messages else [""]
        columns = {k: [v] for k, v in row.items() if k != self.spec.prompt_column}
        for r in self.rewards:
            try:
                values = list(r.fn(prompts=[row[self.spec.prompt_column]], completions=comps, **columns))
            except Exception as exc:
                raise DatasetError(f"reward function {r.path} failed on row 0 of {self.spec.file} with an empty "
                                   f"completion: {type(exc).__name__}: {exc}") from None
            if len(values) != 1:
                raise DatasetError(f"reward function {r.path} returned {len(values)} rewards for 1 completion")


def _prompt_ok(value: Any) -> bool:
    if isinstance(value, str):
        return bool(value)
    return (isinstance(value, list) and bool(value)
            and all(isinstance(m, dict) and "role" in m and isinstance(m.get("content"), str) for m in value))


class FileTasks:
    """This node's dataset files (its mix and its allow-list), found by name or by content hash."""

    def __init__(self, own: list[FileDatasetSpec], accepted: list[FileDatasetSpec]):
        self.by_name: dict[str, FileDataset] = {}
        self.by_hash: dict[str, FileDataset] = {}
        for spec in [*own, *accepted]:
            if spec.name in self.by_name:
                if self.by_name[spec.name].spec != spec:
                    raise DatasetError(f"two different dataset files are named {spec.name!r}: set `name:` apart")
                continue
            ds = FileDataset(spec)
            if ds.sha256 in self.by_hash:
                raise DatasetError(f"{spec.file} and {self.by_hash[ds.sha256].spec.file} hold the same content")
            self.by_name[spec.name] = self.by_hash[ds.sha256] = ds
        self.accepted = {self.by_name[s.name].sha256 for s in accepted}

    def train_task(self, name: str, seed: int, position: int) -> Task:
        ds = self.by_name[name]
        return ds.task(ds.order.train_row(seed, position))

    def eval_tasks(self, name: str) -> list[Task]:
        ds = self.by_name[name]
        return [ds.task(i) for i in ds.order.held_out]

    def check_external(self, ref: TaskRef) -> Task:
        sha = ref.config.get("sha256") if isinstance(ref.config, dict) else None
        if not isinstance(sha, str) or ref.seed != 0 or set(ref.config) != {"sha256"}:
            raise TaskError("bad_task", f"malformed file task reference {ref.dataset}")
        ds = self.by_hash.get(sha)
        if ds is None or sha not in self.accepted:
            raise TaskError("dataset_mismatch", f"{ref.dataset}: no dataset file with sha256 {sha[:12]}… here")
        if not 0 <= ref.index < len(ds.rows):
            raise TaskError("bad_task", f"{ref.dataset}: row {ref.index} out of range")
        if ref.index in ds.order.held_out_set:
            raise TaskError("held_out", f"{ref.dataset}: row {ref.index} is held out for evaluation here")
        return ds.task(ref.index)

    def score(self, task: Task, completions: list[str]) -> list[float]:
        return self.by_hash[task.ref.config["sha256"]].score(task, completions)
