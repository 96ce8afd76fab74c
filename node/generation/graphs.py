"""CUDA graphs of the decode step (node.generation.decode): captured once per StaticDecoder, replayed per token.

A decode step of an eager transformers model launches thousands of small kernels, and on a GPU the
host cannot launch them as fast as the device runs them. A CUDA graph records the step's kernels once
and replays them with one launch. The step reads only the decoder's static buffers (tokens,
positions, attention mask, cache slot) and the KV cache, all allocated before capture and updated
in place, and the model's parameters, which training updates in place — so a replay always
computes the current step with the current weights.

Capture: two warm-up steps on a side stream (they allocate what a step allocates the first time,
e.g. the StaticCache's tensors), the captured step, then the cache is reset (its tensors zeroed in
place: their addresses, which the graph holds, do not change). If capture fails (an operation that
a graph cannot hold), the decoder stays eager, one warning says why, and so does its `capture_error`
(DecodeLoop.mode: the node's first lines, every metrics line, bench.speed.gpu's rows).
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)


class StepGraph:
    def __init__(self, graph: torch.cuda.CUDAGraph, logits: torch.Tensor):
        self.graph, self.logits = graph, logits

    def replay(self) -> torch.Tensor:
        """Run the captured step; its logits [rows, V] (the same static tensor every time)."""
        self.graph.replay()
        return self.logits


def capture(dec) -> None:
    """Capture `dec.step_forward()` into `dec.graph` (a node.generation.decode.StaticDecoder)."""
    try:
        with torch.no_grad(), dec.attention():
            dec.attend[:, 0] = True  # a well-formed mask for the warm-up steps
            stream = torch.cuda.Stream(dec.device)
            stream.wait_stream(torch.cuda.current_stream(dec.device))
            with torch.cuda.stream(stream):
                for _ in range(2):
                    dec.step_forward()
            torch.cuda.current_stream(dec.device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # other threads may query CUDA
                logits = dec.step_forward()
        dec.graph = StepGraph(graph, logits)
    except Exception as exc:  # noqa: BLE001 — any capture failure leaves a working eager decoder
        dec.graph = None
        dec.capture_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
        log.warning("decode step not captured in a CUDA graph (%s); decoding eagerly", dec.capture_error)
    finally:
        dec.cache.reset()
        dec.attend.zero_()
