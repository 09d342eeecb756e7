"""Our own cuDNN SDPA graphs for packed batches of graphs (``cudnn.pygraph`` ``sdpa`` / ``sdpa_backward``).

This is the only module of cudnn-gnn that builds cuDNN attention graphs. What it relies on, read from the frontend
source (nvidia-cudnn-frontend 1.32: ``cudnn/_pygraph.py``, ``cudnn/sdpa/fwd/torch_op.py``) and PyTorch's
``aten/src/ATen/native/cudnn/MHA.cpp``:

* **Layout**: packed ``[T, H, D]`` tensors, declared to cuDNN as ``[B, H, S, D]`` with strides
  ``(S*H*D, D, H*D, 1)`` and a *ragged offset* per tensor: ``B + 1`` int64 **element** offsets of each sequence's
  first token (``cu_seqlens * H * D``); the per-sequence lengths (``[B, 1, 1, 1]`` int32) drive the padding mask.
  ``cu_seqlens == ptr``: each graph attends to its own nodes only, and no batch is padded. ``S`` is the longest
  graph rounded up to a power of two (at least 16), so the plan changes only when the longest graph crosses one.
* **dtypes**: float16 / bfloat16 io, float32 intermediates, compute and softmax statistics.
* **Statistics**: the forward writes its log-sum-exp packed, ``[T, H, 1]`` float32 with a ragged offset
  ``cu_seqlens * H``; the backward reads them padded, ``[B, H, S, 1]`` (the frontend's contract: its backward
  rejects ragged statistics on some architectures), converted here on the device.
* **Dropout**: ``dropout=(p, seed, offset)`` on both nodes, seed and offset ``[1, 1, 1, 1]`` int64 *device* tensors
  (as MHA.cpp passes them). The seed is drawn from torch's generator by a device kernel (:func:`cudnn_gnn._philox.
  draw_seed`), so a call captured in a CUDA graph draws a new mask on every replay; the backward reuses the forward's
  seed and offset, so it sees the forward's mask. ``p`` is part of the graph (and of its key).
* **Backward**: ``max_total_seq_len_q/kv`` size its float32 dq accumulator: an upper bound on ``T``, keyed by
  :func:`bucket_tokens` (8 buckets per power of two) rather than ``T`` rounded to 64, so a ragged epoch uses a few
  backward plans instead of one per distinct ``round64(T)``. ``use_deterministic_algorithm`` where asked.
* **Plans**: keyed like MHA.cpp (:class:`~cudnn_gnn.backends._sdpa_plans.PlanKey`), kept in a bounded LRU
  (:func:`plan_cache_info`) and serialized to a folder (:mod:`cudnn_gnn.backends._sdpa_plans`), from which later
  processes load them instead of building. Built with heuristics A then FALLBACK; a graph cuDNN cannot build raises
  :class:`SdpaUnsupported` (a NotImplementedError naming cuDNN's reason), which ``backend="auto"`` answers with the
  ``flash`` backend.
* **Handles**: one cuDNN handle per thread and device (handles are not thread-safe), bound to torch's current stream
  before each call.

The ops ``cudnn_gnn::sdpa_varlen_fwd`` / ``cudnn_gnn::sdpa_varlen_bwd`` (``torch.library``, with shape-only fakes and
an explicit autograd formula) wire forward and backward. The frontend is reached only through :func:`_frontend`,
which CPU tests replace with a fake that runs the same calls in plain torch.
"""

from __future__ import annotations

import enum
import threading
import warnings
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from cudnn_gnn._philox import draw_seed
from cudnn_gnn.backends._sdpa_plans import PlanCache, PlanCacheInfo, PlanKey, PlanStore, plan_dir

__all__ = [
    "PlanCacheInfo",
    "SdpaUnsupported",
    "bucket_seqlen",
    "bucket_tokens",
    "clear_plan_cache",
    "plan_cache_info",
    "plan_key",
    "round64",
    "sdpa_varlen",
    "supports",
    "used_in_process",
]

KERNEL_DTYPES = (torch.float16, torch.bfloat16)
MIN_SEQLEN_BUCKET = 16
MAX_HEAD_DIM = 128  # conservative: the forward serves 256 on SM90, the ragged backward is only sure to 128
PLAN_CACHE_SIZE = 128


class SdpaUnsupported(NotImplementedError):
    """cuDNN cannot build the SDPA graph of this call (its reason in the message)."""


def bucket_seqlen(n: int) -> int:
    """Round a longest-sequence length up to a power of two, at least 16."""
    b = MIN_SEQLEN_BUCKET
    while b < n:
        b *= 2
    return b


def round64(t: int) -> int:
    """A token total rounded up to a multiple of 64."""
    return -(-t // 64) * 64


def bucket_tokens(t: int) -> int:
    """The backward's ``max_total_seq_len`` for ``t`` tokens: ``t`` rounded up to a multiple of 64 and of
    ``2**(bit_length(t) - 4)``, 8 steps per power of two, so at most 1/8 (and at least 64 tokens) above ``t``."""
    step = max(64, 1 << max(t.bit_length() - 4, 0))
    return max(64, -(-t // step) * step)


def supports(head_dim: int, value_dim: int) -> str | None:
    """None if the kernel serves these head sizes, else the reason it does not."""
    if head_dim != value_dim:
        return f"q/k head size {head_dim} differs from v head size {value_dim}"
    if head_dim % 8 or head_dim > MAX_HEAD_DIM:
        return f"head size must be a multiple of 8 and <= {MAX_HEAD_DIM}, got {head_dim}"
    return None


class Uid(enum.IntEnum):
    """The uids of the graphs' tensors (the variant pack is keyed by them)."""

    Q = 1
    K = 2
    V = 3
    O = 4  # noqa: E741
    STATS = 5
    DO = 6
    DQ = 7
    DK = 8
    DV = 9
    SEQ_LEN_Q = 10
    SEQ_LEN_KV = 11
    RAGGED_Q = 12
    RAGGED_K = 13
    RAGGED_V = 14
    RAGGED_O = 15
    RAGGED_STATS = 16
    RAGGED_DQ = 17
    RAGGED_DK = 18
    RAGGED_DV = 19
    SEED = 20
    OFFSET = 21


def _thd_strides(s: int, h: int, d: int) -> tuple[int, int, int, int]:
    """Descriptor strides of a contiguous ``[T, H, D]`` tensor declared as ``[B, H, S, D]`` (the batch stride is a
    placeholder: the ragged offsets place each sequence)."""
    return (s * h * d, d, h * d, 1)


def plan_key(direction: str, dtype: torch.dtype, batch: int, heads: int, head_dim: int, value_dim: int, seqlen: int,
             scale: float, dropout: float, *, deterministic: bool = False, total_tokens: int = 0) -> PlanKey:
    """The key of one graph (see :class:`~cudnn_gnn.backends._sdpa_plans.PlanKey`); ``seqlen`` is already bucketed."""
    qk = _thd_strides(seqlen, heads, head_dim)
    vo = _thd_strides(seqlen, heads, value_dim)
    return PlanKey(direction, str(dtype).removeprefix("torch."), batch, heads, head_dim, value_dim, seqlen,
                   (qk, qk, vo, vo), float(scale), float(dropout), False,
                   bool(deterministic) if direction == "bwd" else False, total_tokens if direction == "bwd" else 0)


# ----------------------------------------------------------------------------------------------- frontend access


def _frontend() -> Any:
    """The ``cudnn`` module, imported lazily (tests replace this function with a fake frontend)."""
    import cudnn  # type: ignore[import-not-found]

    return cudnn


_TLS = threading.local()


def _handle(fe: Any, device: torch.device) -> Any:
    """This thread's cuDNN handle for ``device``, bound to torch's current stream there."""
    handles = getattr(_TLS, "handles", None)
    if handles is None or handles[0] is not fe:
        handles = _TLS.handles = (fe, {})
    table: dict[torch.device, Any] = handles[1]
    if device not in table:
        if device.type == "cuda":
            with torch.cuda.device(device):
                table[device] = fe.create_handle()
        else:  # a fake frontend on CPU (tests)
            table[device] = fe.create_handle()
    if device.type == "cuda":
        fe.set_stream(handle=table[device], stream=torch.cuda.current_stream(device).cuda_stream)
    return table[device]


def _tag(fe: Any, device: torch.device) -> str:
    """What a serialized plan is only valid for: the cuDNN library, the frontend and the GPU architecture."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        arch = f"sm{major}{minor}"
    else:
        arch = device.type
    return f"cudnn{int(fe.backend_version())}-fe{fe.__version__}-{arch}"


class _Plan(NamedTuple):
    graph: Any  # a built (or deserialized) cudnn.pygraph
    workspace: int  # bytes


_CACHE: PlanCache[_Plan] = PlanCache(PLAN_CACHE_SIZE)
_UNSUPPORTED: dict[tuple[Any, ...], str] = {}  # (device, key) -> cuDNN's reason; not retried in this process
_SERIALIZE_WARNED = False
_USED = False  # whether this process has run cuDNN SDPA (see _cudnn.explain_failure)


def plan_cache_info() -> PlanCacheInfo:
    """Hits, misses, evictions, size, builds, disk loads / writes / rejects of the SDPA plan cache, and the seconds
    spent building plans and loading them from the plan folder (``build_seconds``, ``load_seconds``)."""
    return _CACHE.info()


def clear_plan_cache() -> None:
    """Drop this process's SDPA plans and zero the counts (files on disk stay)."""
    _CACHE.clear()
    _UNSUPPORTED.clear()


_STORES: dict[Any, PlanStore] = {}


def _store() -> PlanStore | None:
    """The store of the current plan folder (one per folder: it warns once about a folder it cannot write)."""
    folder = plan_dir()
    if folder is None:
        return None
    store = _STORES.get(folder)
    if store is None:
        store = _STORES[folder] = PlanStore(folder, on_write=lambda: _CACHE.count("disk_writes"),
                                            on_reject=lambda: _CACHE.count("disk_rejects"))
    return store


def _io_type(fe: Any, dtype: str) -> Any:
    return {"float16": fe.data_type.HALF, "bfloat16": fe.data_type.BFLOAT16}[dtype]


def _column(g: Any, fe: Any, name: str, uid: Uid, rows: int, int64: bool = True) -> Any:
    return g.tensor(name=name, dim=[rows, 1, 1, 1], stride=[1, 1, 1, 1],
                    data_type=fe.data_type.INT64 if int64 else fe.data_type.INT32, uid=uid)


def _build(fe: Any, handle: Any, key: PlanKey) -> Any:
    """Build the cuDNN graph of ``key`` (raises cuDNN's error where it cannot)."""
    io = _io_type(fe, key.dtype)
    f32 = fe.data_type.FLOAT
    g = fe.pygraph(handle=handle, io_data_type=io, intermediate_data_type=f32, compute_data_type=f32)
    b, h, s, d, dv = key.batch, key.heads, key.seqlen, key.head_dim, key.value_dim
    q_st, k_st, v_st, o_st = key.strides
    q = g.tensor(name="q", dim=[b, h, s, d], stride=list(q_st), data_type=io, uid=Uid.Q)
    k = g.tensor(name="k", dim=[b, h, s, d], stride=list(k_st), data_type=io, uid=Uid.K)
    v = g.tensor(name="v", dim=[b, h, s, dv], stride=list(v_st), data_type=io, uid=Uid.V)
    seq_q = _column(g, fe, "seq_len_q", Uid.SEQ_LEN_Q, b, int64=False)
    seq_kv = _column(g, fe, "seq_len_kv", Uid.SEQ_LEN_KV, b, int64=False)
    ragged = {u: _column(g, fe, u.name.lower(), u, b + 1) for u in (Uid.RAGGED_Q, Uid.RAGGED_K, Uid.RAGGED_V,
                                                                       Uid.RAGGED_O)}
    q.set_ragged_offset(ragged[Uid.RAGGED_Q])
    k.set_ragged_offset(ragged[Uid.RAGGED_K])
    v.set_ragged_offset(ragged[Uid.RAGGED_V])
    extra: dict[str, Any] = {}
    if key.dropout > 0:
        seed = _column(g, fe, "seed", Uid.SEED, 1)
        offset = _column(g, fe, "offset", Uid.OFFSET, 1)
        extra["dropout"] = (key.dropout, seed, offset)
    common = dict(attn_scale=key.scale, use_padding_mask=True, seq_len_q=seq_q, seq_len_kv=seq_kv,
                  diagonal_alignment=fe.diagonal_alignment.TOP_LEFT, **extra)
    if key.direction == "fwd":
        o, stats = g.sdpa(name="sdpa_fwd", q=q, k=k, v=v, generate_stats=True, **common)
        o.set_uid(Uid.O).set_output(True).set_dim([b, h, s, dv]).set_stride(list(o_st)).set_data_type(io)
        o.set_ragged_offset(ragged[Uid.RAGGED_O])
        # packed [T, H, 1]: token-major, ragged offset cu_seqlens * H
        stats.set_uid(Uid.STATS).set_output(True).set_dim([b, h, s, 1]).set_stride([s * h, 1, h, 1]).set_data_type(f32)
        stats.set_ragged_offset(_column(g, fe, "ragged_stats", Uid.RAGGED_STATS, b + 1))
    else:
        o = g.tensor(name="o", dim=[b, h, s, dv], stride=list(o_st), data_type=io, uid=Uid.O)
        do = g.tensor(name="dO", dim=[b, h, s, dv], stride=list(o_st), data_type=io, uid=Uid.DO)
        o.set_ragged_offset(ragged[Uid.RAGGED_O])
        do.set_ragged_offset(ragged[Uid.RAGGED_O])
        # padded [B, H, S, 1] (rows past a sequence's length are ignored)
        stats = g.tensor(name="stats", dim=[b, h, s, 1], stride=[h * s, s, 1, 1], data_type=f32, uid=Uid.STATS)
        dq, dk, dvt = g.sdpa_backward(name="sdpa_bwd", q=q, k=k, v=v, o=o, dO=do, stats=stats,
                                      max_total_seq_len_q=key.total_tokens, max_total_seq_len_kv=key.total_tokens,
                                      use_deterministic_algorithm=key.deterministic, **common)
        for t, uid, rag, dim, st in ((dq, Uid.DQ, Uid.RAGGED_DQ, d, q_st), (dk, Uid.DK, Uid.RAGGED_DK, d, k_st),
                                     (dvt, Uid.DV, Uid.RAGGED_DV, dv, v_st)):
            t.set_uid(uid).set_output(True).set_dim([b, h, s, dim]).set_stride(list(st)).set_data_type(io)
            t.set_ragged_offset(_column(g, fe, rag.name.lower(), rag, b + 1))
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([fe.heur_mode.A, fe.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def _load_or_build(fe: Any, device: torch.device, key: PlanKey) -> tuple[_Plan, str]:
    """The plan of ``key``: from the plan folder if a trusted file is there and cuDNN takes it, else built (and
    written there)."""
    handle = _handle(fe, device)
    store = _store()
    tag, text = _tag(fe, device), key.text()
    if store is not None:
        stored = store.load(tag, text)
        if stored is not None:
            try:
                g = fe.pygraph(handle=handle)
                g.deserialize(handle, stored.blob)
                return _Plan(g, stored.workspace), "disk"
            except Exception as e:  # a file cuDNN refuses is rebuilt like any untrusted one
                store.reject(store.path(tag, text), f"cuDNN refused it ({_first_line(e)})")
    try:
        g = _build(fe, handle, key)
    except Exception as e:
        raise SdpaUnsupported(f"cuDNN cannot build this SDPA graph ({key.direction}, {key.dtype}, B={key.batch}, "
                              f"H={key.heads}, D={key.head_dim}, S={key.seqlen}, dropout={key.dropout}): "
                              f"{_first_line(e)}") from e
    plan = _Plan(g, int(g.get_workspace_size()))
    if store is not None:
        try:
            blob = bytes(g.serialize(as_bytes=True))
        except Exception as e:  # the plan runs; it just cannot be kept on disk
            global _SERIALIZE_WARNED
            if not _SERIALIZE_WARNED:
                _SERIALIZE_WARNED = True
                warnings.warn(f"cudnn_gnn: a cuDNN SDPA plan cannot be serialized ({_first_line(e)}); such plans are "
                              "rebuilt by every process", RuntimeWarning, stacklevel=2)
        else:
            store.save(tag, text, blob, plan.workspace)
    return plan, "build"


def _plan(fe: Any, device: torch.device, key: PlanKey) -> _Plan:
    ident = (device, key)
    why = _UNSUPPORTED.get(ident)
    if why is not None:
        raise SdpaUnsupported(why)

    def make() -> tuple[_Plan, str]:
        if device.type == "cuda":
            with torch.cuda.device(device):
                return _load_or_build(fe, device, key)
        return _load_or_build(fe, device, key)

    try:
        return _CACHE.get(ident, make)
    except SdpaUnsupported as e:
        _UNSUPPORTED[ident] = str(e)
        raise


def _execute(fe: Any, plan: _Plan, pack: dict[Uid, Tensor], device: torch.device) -> None:
    workspace = torch.empty(max(plan.workspace, 1), dtype=torch.uint8, device=device)
    plan.graph.execute({int(u): t for u, t in pack.items()}, workspace, handle=_handle(fe, device))


# ----------------------------------------------------------------------------------------------- variant pack pieces


def ragged_columns(cu_seqlens: Tensor, multipliers: tuple[int, ...]) -> list[Tensor]:
    """``cu_seqlens * m`` for each ``m`` as ``[B+1, 1, 1, 1]`` int64 columns (element offsets), each starting on a
    16-byte boundary of one buffer (one kernel; the descriptors want aligned bases)."""
    n = cu_seqlens.numel()
    pitch = -(-n // 2) * 2
    cu = F.pad(cu_seqlens.to(torch.int64), (0, pitch - n))
    table = torch.stack([cu * m for m in multipliers])  # scalar products: no host-to-device copy (capturable)
    return [row[:n].reshape(n, 1, 1, 1) for row in table.unbind(0)]


def length_columns(cu_seqlens: Tensor, seqlen: int) -> tuple[Tensor, Tensor]:
    """The sequence lengths, ``[B, 1, 1, 1]`` int32 twice (q and kv, 16-byte aligned), capped at ``seqlen`` (a graph
    over the bound only happens for a batch the op has already marked to come out NaN)."""
    b = cu_seqlens.numel() - 1
    pitch = -(-max(b, 1) // 4) * 4
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).clamp(0, seqlen).to(torch.int32)
    table = F.pad(lengths, (0, pitch - b)).expand(2, pitch).contiguous()
    return table[0, :b].reshape(b, 1, 1, 1), table[1, :b].reshape(b, 1, 1, 1)


def padded_stats(stats: Tensor, cu_seqlens: Tensor, seqlen: int) -> Tensor:
    """Packed statistics ``[T, H, 1]`` -> padded ``[B, H, S, 1]`` float32 (zeros past each sequence), on the
    device without a sync; positions past ``seqlen`` (a NaN-marked batch) are clamped, not written out of range."""
    t, h = stats.shape[:2]
    b = cu_seqlens.numel() - 1
    cu = cu_seqlens.to(torch.int64)
    graph = torch.repeat_interleave(torch.arange(b, device=stats.device), cu[1:] - cu[:-1], output_size=t)
    pos = (torch.arange(t, device=stats.device) - cu[graph]).clamp(0, seqlen - 1)
    out = stats.new_zeros(b, h, seqlen, 1)
    out[graph, :, pos, 0] = stats[:, :, 0]
    return out


def _operand(x: Tensor) -> Tensor:
    """Contiguous, on a 16-byte aligned base (the descriptors' contract)."""
    x = x.contiguous()
    return x.clone() if x.data_ptr() % 16 else x


def draw_dropout_rng(device: torch.device, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Seed and offset of one dropout call, ``[1, 1, 1, 1]`` int64 on ``device``: a fresh seed from torch's generator
    (a device kernel, no sync; a new one on every CUDA-graph replay) and offset 0."""
    seed = draw_seed(device, generator).reshape(1, 1, 1, 1)
    return seed, torch.zeros((1, 1, 1, 1), dtype=torch.int64, device=device)


# ----------------------------------------------------------------------------------------------- the two calls


def _forward(q: Tensor, k: Tensor, v: Tensor, cu: Tensor, seed: Tensor | None, offset: Tensor | None, seqlen: int,
             scale: float, dropout_p: float) -> tuple[Tensor, Tensor]:
    global _USED
    if not _USED:  # here, at run time (not when torch.compile traces the call)
        _warn_if_it_disables_gat()
    _USED = True
    fe = _frontend()
    t, h, d = q.shape
    dv = v.shape[2]
    b = cu.numel() - 1
    plan = _plan(fe, q.device, plan_key("fwd", q.dtype, b, h, d, dv, seqlen, scale, dropout_p))
    q, k, v = _operand(q), _operand(k), _operand(v)
    out = q.new_empty(t, h, dv)
    stats = torch.empty(t, h, 1, dtype=torch.float32, device=q.device)
    rq, rk, rv, ro, rs = ragged_columns(cu, (h * d, h * d, h * dv, h * dv, h))
    len_q, len_kv = length_columns(cu, seqlen)
    pack = {Uid.Q: q, Uid.K: k, Uid.V: v, Uid.O: out, Uid.STATS: stats, Uid.SEQ_LEN_Q: len_q,
            Uid.SEQ_LEN_KV: len_kv, Uid.RAGGED_Q: rq, Uid.RAGGED_K: rk, Uid.RAGGED_V: rv, Uid.RAGGED_O: ro,
            Uid.RAGGED_STATS: rs}
    if dropout_p > 0:
        assert seed is not None and offset is not None  # internal: sdpa_varlen draws them
        pack.update({Uid.SEED: seed, Uid.OFFSET: offset})
    _execute(fe, plan, pack, q.device)
    return out, stats


def _backward(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, stats: Tensor, cu: Tensor,
              seed: Tensor | None, offset: Tensor | None, seqlen: int, scale: float, dropout_p: float,
              deterministic: bool) -> tuple[Tensor, Tensor, Tensor]:
    fe = _frontend()
    t, h, d = q.shape
    dv = v.shape[2]
    b = cu.numel() - 1
    key = plan_key("bwd", q.dtype, b, h, d, dv, seqlen, scale, dropout_p, deterministic=deterministic,
                   total_tokens=bucket_tokens(t))
    plan = _plan(fe, q.device, key)
    q, k, v, out, grad = _operand(q), _operand(k), _operand(v), _operand(out), _operand(grad.to(q.dtype))
    dq, dk, dvv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    rq, rk, rv, ro, rdq, rdk, rdv = ragged_columns(cu, (h * d, h * d, h * dv, h * dv, h * d, h * d, h * dv))
    len_q, len_kv = length_columns(cu, seqlen)
    pack = {Uid.Q: q, Uid.K: k, Uid.V: v, Uid.O: out, Uid.DO: grad, Uid.STATS: padded_stats(stats, cu, seqlen),
            Uid.DQ: dq, Uid.DK: dk, Uid.DV: dvv, Uid.SEQ_LEN_Q: len_q, Uid.SEQ_LEN_KV: len_kv, Uid.RAGGED_Q: rq,
            Uid.RAGGED_K: rk, Uid.RAGGED_V: rv, Uid.RAGGED_O: ro, Uid.RAGGED_DQ: rdq, Uid.RAGGED_DK: rdk,
            Uid.RAGGED_DV: rdv}
    if dropout_p > 0:
        assert seed is not None and offset is not None  # internal: saved by the forward
        pack.update({Uid.SEED: seed, Uid.OFFSET: offset})
    _execute(fe, plan, pack, q.device)
    return dq, dk, dvv


@torch.library.custom_op("cudnn_gnn::sdpa_varlen_fwd", mutates_args=())
def _fwd_op(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, seed: Tensor | None, offset: Tensor | None,
            seqlen: int, scale: float, dropout_p: float, deterministic: bool) -> tuple[Tensor, Tensor]:
    return _forward(q, k, v, cu_seqlens, seed, offset, seqlen, scale, dropout_p)


@_fwd_op.register_fake
def _fwd_fake(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, seed: Tensor | None, offset: Tensor | None,
              seqlen: int, scale: float, dropout_p: float, deterministic: bool) -> tuple[Tensor, Tensor]:
    t, h, _ = q.shape
    return q.new_empty(t, h, v.shape[2]), q.new_empty(t, h, 1, dtype=torch.float32)


@torch.library.custom_op("cudnn_gnn::sdpa_varlen_bwd", mutates_args=())
def _bwd_op(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, stats: Tensor, cu_seqlens: Tensor,
            seed: Tensor | None, offset: Tensor | None, seqlen: int, scale: float, dropout_p: float,
            deterministic: bool) -> tuple[Tensor, Tensor, Tensor]:
    return _backward(grad, q, k, v, out, stats, cu_seqlens, seed, offset, seqlen, scale, dropout_p, deterministic)


@_bwd_op.register_fake
def _bwd_fake(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, stats: Tensor, cu_seqlens: Tensor,
              seed: Tensor | None, offset: Tensor | None, seqlen: int, scale: float, dropout_p: float,
              deterministic: bool) -> tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    q, k, v, cu, seed, offset, seqlen, scale, dropout_p, deterministic = inputs
    out, stats = output
    ctx.save_for_backward(q, k, v, out, stats, cu, seed, offset)
    ctx.call = (seqlen, scale, dropout_p, deterministic)
    ctx.mark_non_differentiable(stats)
    ctx.set_materialize_grads(False)


def _autograd_backward(ctx: Any, grad: Tensor | None, _grad_stats: Tensor | None) -> tuple[Tensor | None, ...]:
    if grad is None:
        return (None,) * 10
    q, k, v, out, stats, cu, seed, offset = ctx.saved_tensors
    dq, dk, dv = _bwd_op(grad, q, k, v, out, stats, cu, seed, offset, *ctx.call)
    return dq, dk, dv, None, None, None, None, None, None, None


_fwd_op.register_autograd(_autograd_backward, setup_context=_setup_context)


# ----------------------------------------------------------------------------------------------- entry point


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
    """Whether cuDNN SDPA has run in this process."""
    return _USED


def sdpa_varlen(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens: Tensor,
    max_seqlen: int,
    scale: float,
    *,
    dropout_p: float = 0.0,
    deterministic: bool | None = None,
    generator: torch.Generator | None = None,
    compute_dtype: torch.dtype = torch.bfloat16,
) -> Tensor:
    """Self-attention of packed sequences on our cuDNN graphs (differentiable).

    Args:
        q, k, v: ``[T, H, D]``, one floating dtype. float16/bfloat16 run as given; other dtypes are cast to
            ``compute_dtype`` (default bfloat16) for the kernel and the output is cast back (autograd casts the
            gradients back too), so fp32 inputs get bf16 precision (~3 significant digits).
        cu_seqlens: ``[B+1]`` int32 or int64 prefix sums, ``cu_seqlens[-1] == T``.
        max_seqlen: an upper bound on ``cu_seqlens`` differences (bucketed here to a power of two).
        scale: the softmax scale.
        dropout_p: attention dropout probability (0: none). The mask comes from a seed drawn from torch's generator
            of q's device (or ``generator``) on the device: seeded runs repeat, CUDA-graph replays draw new masks.
        deterministic: the backward's deterministic algorithm; None follows
            ``torch.are_deterministic_algorithms_enabled()`` at this call.
        generator: the generator the dropout seed is drawn from.

    Returns:
        ``[T, H, D]`` in q's dtype.

    Raises:
        SdpaUnsupported: cuDNN cannot build a graph for this call (its reason in the message).
    """
    out_dtype = q.dtype
    if q.dtype not in KERNEL_DTYPES:
        q, k, v = q.to(compute_dtype), k.to(compute_dtype), v.to(compute_dtype)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # base alignment: inside the op (no data_ptr when traced)
    if deterministic is None:
        deterministic = torch.are_deterministic_algorithms_enabled()
    seed = offset = None
    dropout_p = float(dropout_p)
    if dropout_p > 0:
        seed, offset = draw_dropout_rng(q.device, generator)
    out, _ = _fwd_op(q, k, v, cu_seqlens, seed, offset, bucket_seqlen(max_seqlen), float(scale), dropout_p,
                     bool(deterministic))
    return out.to(out_dtype)

