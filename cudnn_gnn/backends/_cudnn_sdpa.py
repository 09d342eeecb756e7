"""Adapter for cuDNN's scaled-dot-product attention (``cudnn.sdpa_torch``), packed THD / varlen layout.

This is the only module of cudnn-gnn that calls ``cudnn.sdpa_torch``. What it relies on, read from the
frontend source (nvidia-cudnn-frontend 1.32, ``cudnn/sdpa/fwd/torch_op.py``):

* Layout: packed ``[T, H, D]`` tensors and ``cu_seqlens_q/kv`` ``[B+1]`` token prefix sums (FlashAttention's
  varlen contract), with ``max_seqlen_q/kv`` >= the longest sequence. No mask other than causal/band: each
  sequence attends to itself only, which is exactly "attention among the nodes of each graph".
* dtypes: float16 and bfloat16 only (the op raises on anything else), fp32 accumulation inside.
* Autograd: ``torch.ops.cudnn.sdpa_fwd`` is differentiable on the varlen path only with ``return_lse=True``
  (the backward consumes the forward's softmax statistics); the backward honours
  ``torch.are_deterministic_algorithms_enabled()``.
* No dropout argument: attention dropout is not available on this kernel (the op layer routes it elsewhere).
* Plan cache: the frontend keeps every built cuDNN graph in a process-global dict, FIFO-evicted at 128 entries.
  The forward key holds (dtype, B, H, max_seqlen, D, strides, scale, flags); the backward key additionally holds
  the token total T rounded up to 64. A ragged training stream where B is fixed but ``max_seqlen`` and T change
  every step would therefore build a new forward and backward graph almost every step (each build costs
  milliseconds to seconds) and, past 128 shapes, evict its own hot plans.

What this adapter adds on top:

* **Sequence buckets.** ``max_seqlen`` is rounded up to a power of two (at least 16), so the forward key changes
  only when the longest graph crosses a power of two. The token total T is *not* padded: the frontend's backward
  re-pads the softmax statistics by ``cu_seqlens`` and indexes out of bounds for rows past ``cu_seqlens[-1]``
  (a device-side assert with cuDNN 9.28.1 / frontend 1.32), so T must equal
  ``cu_seqlens[-1]``. The backward key therefore follows round64(T).
* **A bounded LRU ledger** (:class:`PlanLedger`) of the bucket keys sent to the frontend: it counts plan builds
  (a miss is one forward graph, plus one backward graph when gradients flow) and keeps at most
  ``maxsize = 64`` keys, so while it reports no evictions the frontend holds at most 2 x 64 = 128 of our graphs
  and its FIFO never evicts a plan we still use. An eviction in the ledger means the workload churns more
  shapes than the frontend can keep; we warn once. We do not touch the frontend's private cache.

Builds per epoch: with a fixed batch size, #forward builds = #max_seqlen buckets seen (1-2 for a dataset of
similar graphs, plus one for the smaller last batch) and #backward builds = #distinct (max_seqlen bucket,
round64(T)) pairs: for 128 graphs of 10-500 nodes, T ~ 33k +- 5% spans ~50 multiples of 64, so most training
steps of the first epoch build a backward plan (milliseconds each) and later epochs reuse them while they fit
the frontend's 128-entry cache.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

__all__ = [
    "PlanCacheInfo",
    "PlanLedger",
    "bucket_seqlen",
    "round64",
    "clear_plan_cache",
    "plan_cache_info",
    "sdpa_varlen",
    "supports",
]

KERNEL_DTYPES = (torch.float16, torch.bfloat16)
MIN_SEQLEN_BUCKET = 16
MAX_HEAD_DIM = 128  # conservative: the forward serves 256 on SM90, the varlen backward is only sure to 128
FRONTEND_CACHE_SIZE = 128  # cudnn/sdpa/fwd/torch_op.py: _GRAPH_CACHE_MAX


def bucket_seqlen(n: int) -> int:
    """Round a longest-sequence length up to a power of two, at least 16."""
    b = MIN_SEQLEN_BUCKET
    while b < n:
        b *= 2
    return b


def round64(t: int) -> int:
    """The frontend's backward-plan rounding of a token total."""
    return -(-t // 64) * 64


class PlanCacheInfo(NamedTuple):
    hits: int
    misses: int
    evictions: int
    currsize: int
    maxsize: int


class PlanLedger:
    """A bounded LRU of the bucket keys this process has sent to ``cudnn.sdpa_torch``.

    A miss means the frontend builds (and caches) a new forward graph, and a backward graph on the first
    backward of that key; a key is (dtype, B, max_seqlen bucket, T bucket, H, D, scale, device), a superset of
    the frontend's forward key, so misses bound its builds from above. Thread-safe; holds no tensors.
    """

    def __init__(self, maxsize: int = FRONTEND_CACHE_SIZE // 2) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self._keys: OrderedDict[tuple[Any, ...], None] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = self.evictions = 0
        self._warned = False

    def touch(self, key: tuple[Any, ...]) -> bool:
        """Record one use of ``key``; return True on a miss (a new plan)."""
        with self._lock:
            if key in self._keys:
                self._keys.move_to_end(key)
                self.hits += 1
                return False
            self.misses += 1
            self._keys[key] = None
            evicted = False
            while len(self._keys) > self.maxsize:
                self._keys.popitem(last=False)
                self.evictions += 1
                evicted = True
        if evicted and not self._warned:
            self._warned = True
            warnings.warn(
                f"cudnn_gnn: more than {self.maxsize} distinct cuDNN SDPA shape buckets in use; the frontend's plan "
                f"cache ({FRONTEND_CACHE_SIZE} graphs, FIFO) will rebuild plans. Batches with a steadier batch size "
                "or node count, or a fixed max_num_nodes, avoid this.",
                RuntimeWarning,
                stacklevel=4,
            )
        return True

    def info(self) -> PlanCacheInfo:
        with self._lock:
            return PlanCacheInfo(self.hits, self.misses, self.evictions, len(self._keys), self.maxsize)

    def clear(self) -> None:
        with self._lock:
            self._keys.clear()
            self.hits = self.misses = self.evictions = 0
            self._warned = False


_LEDGER = PlanLedger()


def plan_cache_info() -> PlanCacheInfo:
    """Hits, misses (= frontend plan builds), evictions and size of the SDPA plan ledger."""
    return _LEDGER.info()


def clear_plan_cache() -> None:
    """Reset the ledger's counters and keys (the frontend's own graphs stay built)."""
    _LEDGER.clear()


_USED = False  # whether this process has called cudnn.sdpa_torch (see _cudnn.explain_failure)


def _warn_if_it_disables_gat() -> None:
    """At the first cuDNN SDPA call of a process: warn where this cuDNN lacks its precompiled engines, so that
    the SDPA backward will switch cuDNN to JIT-only mode and break the cuDNN GAT calls after it."""
    from cudnn_gnn.backends.info import (
        JIT_ONLY_NOTE,
        PRECOMPILED,
        backend_info,
        lacking_precompiled,
        mapped_cudnn_libraries,
    )

    lacking = lacking_precompiled(mapped_cudnn_libraries())
    if lacking and backend_info().reason is None:  # cuDNN GAT runs in this process
        warnings.warn(f"cuDNN SDPA with the cuDNN in {', '.join(lacking)}, which lacks {PRECOMPILED}: "
                      f"{JIT_ONLY_NOTE}.", RuntimeWarning, stacklevel=3)


def used_in_process() -> bool:
    """Whether ``cudnn.sdpa_torch`` has run in this process."""
    return _USED


def _kernel() -> Callable[..., Any]:
    """``cudnn.sdpa_torch``, imported lazily (tests replace this function with a fake)."""
    import cudnn  # type: ignore[import-not-found]

    return cudnn.sdpa_torch  # type: ignore[no-any-return]


def supports(head_dim: int, value_dim: int) -> str | None:
    """None if the kernel serves these head sizes, else the reason it does not."""
    if head_dim != value_dim:
        return f"q/k head size {head_dim} differs from v head size {value_dim}"
    if head_dim % 8 or head_dim > MAX_HEAD_DIM:
        return f"head size must be a multiple of 8 and <= {MAX_HEAD_DIM}, got {head_dim}"
    return None


def sdpa_varlen(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens: Tensor,
    max_seqlen: int,
    scale: float,
    *,
    compute_dtype: torch.dtype = torch.bfloat16,
) -> Tensor:
    """Varlen self-attention of packed sequences on cuDNN.

    Args:
        q, k, v: ``[T, H, D]``, one floating dtype. float16/bfloat16 run as given; other dtypes are cast to
            ``compute_dtype`` (default bfloat16) for the kernel and the output is cast back (autograd casts the
            gradients back too), so fp32 inputs get bf16 precision (~3 significant digits).
        cu_seqlens: ``[B+1]`` int32 or int64 prefix sums, ``cu_seqlens[-1] == T``.
        max_seqlen: an upper bound on ``cu_seqlens`` differences (bucketed here).
        scale: the softmax scale.

    Returns:
        ``[T, H, D]`` in q's dtype.
    """
    out_dtype = q.dtype
    if q.dtype not in KERNEL_DTYPES:
        q, k, v = q.to(compute_dtype), k.to(compute_dtype), v.to(compute_dtype)
    t, h, d = q.shape
    seq_bucket = bucket_seqlen(max_seqlen)
    # No padding of the token total: the frontend's backward re-pads the log-sum-exp by cu_seqlens and indexes
    # out of bounds for rows past cu_seqlens[-1] (a device-side assert with cuDNN 9.28.1, frontend 1.32).
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    key = (q.dtype, cu_seqlens.numel() - 1, seq_bucket, round64(t), h, d, float(scale), q.device)
    _LEDGER.touch(key)
    cu = cu_seqlens.to(torch.int32)
    global _USED
    if not _USED:
        _warn_if_it_disables_gat()
    _USED = True
    out, _ = _kernel()(
        q,
        k,
        v,
        scale=float(scale),
        cu_seqlens_q=cu,
        cu_seqlens_kv=cu,
        max_seqlen_q=seq_bucket,
        max_seqlen_kv=seq_bucket,
        return_lse=True,  # needed for autograd; also keeps training and eval on one forward plan
    )
    return out.to(out_dtype)
