"""Global (full) multi-head attention among the nodes of each graph of a PyG batch, without padding.

Graphs of a batch are packed back to back (PyG's layout: the nodes of graph ``b`` are rows
``ptr[b]:ptr[b+1]``), which is the THD / varlen layout of FlashAttention and cuDNN: ``cu_seqlens == ptr``.

Why not torch's cuDNN SDPA: running ``F.scaled_dot_product_attention`` on ``SDPBackend.CUDNN_ATTENTION`` can
make every later cuDNN GAT call in the process fail with ``CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE``
(docs/gpu-install.md), while graphs built through the cuDNN frontend's own graph API and torch's flash /
``varlen_attn`` leave it working. So this module never selects ``SDPBackend.CUDNN_ATTENTION``: the cuDNN path is our
own graphs (:mod:`cudnn_gnn.backends._cudnn_sdpa`), and every
``F.scaled_dot_product_attention`` call here runs under ``sdpa_kernel([FLASH_ATTENTION, EFFICIENT_ATTENTION,
MATH])``.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from cudnn_gnn._validation import check_bool, check_choice, check_float, check_index, check_int, check_probability
from cudnn_gnn._validation import sync_is_costly as _sync_is_costly
from cudnn_gnn.backends import ATTENTION_BACKENDS
from cudnn_gnn.backends.info import backend_info
from cudnn_gnn.backends.triton import packed_offsets

__all__ = ["graph_attention", "choose_backend"]
_FLASH_DTYPES = (torch.float16, torch.bfloat16)


def graph_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    ptr: Tensor | None = None,
    *,
    batch: Tensor | None = None,
    num_graphs: int | None = None,
    max_num_nodes: int | None = None,
    dropout: float = 0.0,
    training: bool = False,
    scale: float | None = None,
    backend: str = "auto",
    validate: bool | None = None,
    deterministic: bool | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""Multi-head softmax attention among the nodes of each graph of a batch (no mask across graphs).

    .. math::
        \mathrm{out}_i^h = \sum_{j \in G(i)} \mathrm{softmax}_j\big(s \, q_i^h \cdot k_j^h\big) \, v_j^h

    where :math:`G(i)` is the graph of node :math:`i` and :math:`s` the scale. No causal mask.

    Args:
        q, k: ``[N, H, D]`` queries and keys; v: ``[N, H, Dv]``. One floating dtype, one device.
        ptr: ``[B+1]`` int32/int64 node offsets of the graphs (``data.ptr`` of a PyG ``Batch``); repeated values
            are empty graphs. Give ``ptr`` or ``batch``; with neither, all ``N`` nodes form one graph.
        batch: ``[N]`` sorted graph index of each node (PyG's ``batch``). Turned into ``ptr`` on the device:
            with ``num_graphs`` given, without a host sync; without it, one sync (empty graphs then vanish,
            which does not change the result).
        num_graphs: ``B``, used with ``batch``.
        max_num_nodes: an upper bound on the nodes of one graph. The kernels need it on the host; without it
            the op reads it from ``ptr`` (one device-to-host sync). Models pass it once per batch.
        dropout: probability of zeroing an attention coefficient (training only), as in
            ``nn.MultiheadAttention``. cuDNN applies it inside its kernel (a seed drawn from torch's generator on
            the device: seeded runs repeat, CUDA-graph replays draw new masks); ``varlen_attn`` has no dropout, so
            the ``flash`` backend runs its padded path for it. ``dropout=1`` (everything dropped) does not run on
            cuDNN.
        training: apply ``dropout``.
        scale: softmax scale, default ``1 / sqrt(D)``.
        backend: ``"auto" | "cudnn" | "flash" | "reference"``.

            * ``"cudnn"``: our cuDNN SDPA graphs on packed ``[N, H, D]`` with ragged offsets from ``ptr``
              (:mod:`cudnn_gnn.backends._cudnn_sdpa`), attention dropout included. fp16/bf16 kernel with float32
              statistics: float32/float64 inputs are cast to bfloat16 inside and the output (and, through
              autograd, the gradients) cast back, so they carry bf16 precision. Head size a multiple of 8, at
              most 128, ``Dv == D``. A plan per shape bucket (batch size, longest graph rounded up to a power of
              two, dtype, heads, head size, scale, dropout; the backward also the node total in 8 buckets per
              power of two): the first call of a bucket builds it (milliseconds to seconds) and writes it to the
              plan folder, from which later processes load it (:func:`cudnn_gnn.precompile` fills it ahead);
              see :func:`cudnn_gnn.backends._cudnn_sdpa.plan_cache_info`.
            * ``"flash"``: torch's fused kernels. Without dropout, ``torch.nn.attention.varlen.varlen_attn``
              (packed; fp32 cast to bf16 like cuDNN); with dropout, or where varlen is missing or does not fit,
              padded ``F.scaled_dot_product_attention`` with a key-padding mask on flash / memory-efficient /
              math kernels (any dtype).
            * ``"reference"``: plain PyTorch math on graphs padded to ``max_num_nodes``: any device and dtype,
              the test oracle; memory ``B * H * max_num_nodes**2``.
            * ``"auto"``: CPU -> reference. CUDA -> ``cudnn`` where the frontend's graph API is available, the call
              fits it (head size, ``dropout < 1``) and every cuDNN mapped into the process has
              ``libcudnn_engines_precompiled``; else ``flash``. Without those engines the SDPA backward switches
              cuDNN to JIT-only mode and later cuDNN GAT calls fail with
              CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE (docs/gpu-install.md). ``python -m cudnn_gnn
              info`` flags such an install.
        validate: the value checks: ``ptr`` starts at 0, never decreases and ends at ``N``; ``batch`` is sorted and
            in ``[0, num_graphs)``; ``max_num_nodes`` bounds every graph. ``None`` (default): checked in the host
            sync the call makes anyway to read the largest graph (no ``max_num_nodes``), or on CPU tensors, raising
            ValueError; on CUDA with ``max_num_nodes`` given (no sync wanted) checked on the device (with ``ptr``:
            one Triton launch, :mod:`cudnn_gnn.backends.triton.packed_offsets`), and a batch that fails gets NaN outputs
            instead of wrong numbers. ``True``: always checked and raised (one sync).
            ``False``: trusted (for callers that guarantee their batches).
        deterministic: cuDNN's deterministic backward (bitwise repeatable gradients, somewhat slower); ``None``
            follows ``torch.are_deterministic_algorithms_enabled()``. Other backends ignore it.
        generator: the generator attention dropout draws from on the ``cudnn`` backend (default: the device's).

    Returns:
        ``[N, H, Dv]`` in q's dtype.

    Raises:
        TypeError: a tensor argument is not a tensor or has the wrong dtype; a knob has the wrong type.
        ValueError: shapes disagree, a value is out of range, or ``backend`` is unknown.
        RuntimeError: ``backend="cudnn"`` or ``"flash"`` cannot run here (says why and the fix).
        NotImplementedError: ``backend="cudnn"`` with ``dropout=1`` in training, an unsupported head size, or a
            call cuDNN cannot build a graph for (its reason in the message; ``auto`` runs ``flash`` instead).

    Example:
        >>> q = k = v = torch.randn(5, 2, 8)
        >>> graph_attention(q, k, v, torch.tensor([0, 2, 5])).shape
        torch.Size([5, 2, 8])
    """
    q = check_float("q", q)
    k = check_float("k", k)
    v = check_float("v", v)
    if q.dim() != 3:
        raise ValueError(f"q must have shape [N, H, D], got {tuple(q.shape)}")
    n, h, d = q.shape
    if tuple(k.shape) != (n, h, d):
        raise ValueError(f"k must have shape {(n, h, d)} like q, got {tuple(k.shape)}")
    if v.dim() != 3 or tuple(v.shape[:2]) != (n, h):
        raise ValueError(f"v must have shape ({n}, {h}, Dv) like q, got {tuple(v.shape)}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name} must be on q's device {q.device}, got {t.device}")
    dropout = check_probability("dropout", dropout, allow_one=True)
    training = check_bool("training", training)
    if validate is not None:
        validate = check_bool("validate", validate)
    if deterministic is not None:
        deterministic = check_bool("deterministic", deterministic)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if scale is None:
        scale = 1.0 / math.sqrt(d) if d > 0 else 1.0
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float, got {type(scale).__name__}")
    if num_graphs is not None:
        check_int("num_graphs", num_graphs)
    if max_num_nodes is not None:
        check_int("max_num_nodes", max_num_nodes)
    check_choice("backend", backend, ATTENTION_BACKENDS)

    batch_given = batch if ptr is None else None
    ptr = _graph_offsets(n, q.device, ptr, batch, num_graphs)
    p_dropout = dropout if training else 0.0
    chosen = choose_backend(backend, q.device, d, v.shape[-1], p_dropout)
    if n == 0:
        return v * 0  # [0, H, Dv], connected to autograd
    if ptr.numel() == 1:
        raise ValueError(f"ptr must end at N={n}, got a batch of no graphs")
    poison = poison_flag = None
    if validate is False:  # trusted: no check, and nothing computed that only a check would read
        if max_num_nodes is None:
            max_num_nodes = int((ptr[1:] - ptr[:-1]).max())  # the one host sync of the default forward
    elif validate or max_num_nodes is None or not _sync_is_costly(q.device):
        largest = (ptr[1:] - ptr[:-1]).max()
        bad, big = torch.stack([_invalid(ptr, n, batch_given, num_graphs).long(), largest]).tolist()  # one sync
        if bad:
            _raise_invalid(ptr, n, batch_given, num_graphs)
        if max_num_nodes is None:
            max_num_nodes = big
        elif big > max_num_nodes:
            raise ValueError(f"max_num_nodes must bound the nodes of every graph, got {max_num_nodes} for a graph "
                             f"of {big}")
    else:  # CUDA, max_num_nodes given: checked on the device, no sync; a bad batch gets NaN, not wrong numbers.
        # What the kernels see is a valid layout whatever ptr held (within [0, N], non-decreasing, 0 to N), and
        # node positions are clamped below max_num_nodes (_pad_index), so nothing indexes out of range.
        if batch_given is None and packed_offsets.available(q.device):
            ptr, poison_flag = packed_offsets.checked_offsets(ptr, n, max_num_nodes, q.dtype)  # one launch
        else:  # the same in torch ops (~17 launches): a batch to check too, or no Triton
            poison = _invalid(ptr, n, batch_given, num_graphs) | ((ptr[1:] - ptr[:-1]).max() > max_num_nodes)
            ptr = torch.cummax(ptr.clamp(0, n), 0).values
            ptr = torch.cat([ptr.new_zeros(1), ptr[1:-1], ptr.new_full((1,), n)])
    max_num_nodes = max(max_num_nodes, 1)

    if chosen == "cudnn":
        from cudnn_gnn.backends import _cudnn_sdpa

        try:
            out = _cudnn_sdpa.sdpa_varlen(q, k, v, ptr, max_num_nodes, float(scale), dropout_p=p_dropout,
                                          deterministic=deterministic, generator=generator)
        except _cudnn_sdpa.SdpaUnsupported as e:
            if backend != "auto":
                raise NotImplementedError(f"backend='cudnn' cannot run this call: {e}; use backend='flash' or "
                                          "'auto'") from e
            _warn_fallback(str(e))
            chosen = "flash"
    if chosen == "flash":
        out = _attention_torch_fused(q, k, v, ptr, max_num_nodes, float(scale), p_dropout)
    elif chosen == "reference":
        out = _attention_reference(q, k, v, ptr, max_num_nodes, float(scale), p_dropout)
    if poison_flag is not None:
        return out + poison_flag  # 0, or NaN for a bad batch; no backward kernel
    return out if poison is None else torch.where(poison, torch.full_like(out, float("nan")), out)


_FALLBACK_WARNED: set[str] = set()


def _warn_fallback(why: str) -> None:
    """``auto`` met a call cuDNN cannot build a graph for: say so once per reason, then run ``flash``."""
    if why not in _FALLBACK_WARNED:
        _FALLBACK_WARNED.add(why)
        warnings.warn(f"graph_attention: {why}; backend='auto' runs 'flash' for such calls", RuntimeWarning,
                      stacklevel=3)


def _invalid(ptr: Tensor, n: int, batch: Tensor | None, num_graphs: int | None) -> Tensor:
    """A device bool: ``ptr`` (``[B+1]``, from the caller or derived from ``batch``) does not start at 0, decreases
    or does not end at ``n``, or ``batch`` (``[n]``, ``n > 0``) is unsorted, negative or not below ``num_graphs``."""
    bad = (ptr[0] != 0) | (ptr[-1] != n) | (ptr[1:] < ptr[:-1]).any()
    if batch is not None:
        bad = bad | (batch[1:] < batch[:-1]).any() | (batch[0] < 0)
        if num_graphs is not None:
            bad = bad | (batch[-1] >= num_graphs)
    return bad


def _raise_invalid(ptr: Tensor, n: int, batch: Tensor | None, num_graphs: int | None) -> None:
    """Name what :func:`_invalid` found (the error path: syncs freely)."""
    if batch is not None:
        if bool((batch[1:] < batch[:-1]).any()) or int(batch[0]) < 0:
            raise ValueError("batch must be sorted and non-negative (nodes of one graph contiguous), got unsorted")
        if num_graphs is not None and int(batch[-1]) >= num_graphs:
            raise ValueError(f"batch must be < num_graphs={num_graphs}, got {int(batch[-1])}")
    p = ptr.tolist()
    raise ValueError(f"ptr must start at 0, never decrease and end at N={n}, got {p[:8]}{'...' if len(p) > 8 else ''}")


def _graph_offsets(n: int, device: torch.device, ptr: Tensor | None, batch: Tensor | None,
                   num_graphs: int | None) -> Tensor:
    """``[B+1]`` int64 offsets on ``device`` from ``ptr``, ``batch`` or neither (one graph); shapes checked here,
    values by the caller (:func:`_invalid`)."""
    if ptr is not None and batch is not None:
        raise ValueError("ptr and batch must not both be given, got both")
    if ptr is not None:
        ptr = check_index("ptr", ptr)
        if ptr.dim() != 1 or ptr.numel() < 1:
            raise ValueError(f"ptr must have shape [B+1] with B >= 0, got {tuple(ptr.shape)}")
        if ptr.device != device:
            raise ValueError(f"ptr must be on q's device {device}, got {ptr.device}")
        if num_graphs is not None and ptr.numel() != num_graphs + 1:
            raise ValueError(f"ptr must have num_graphs + 1 = {num_graphs + 1} entries, got {ptr.numel()}")
        return ptr.long()
    if batch is None:
        return torch.tensor([0, n], device=device)
    batch = check_index("batch", batch)
    if tuple(batch.shape) != (n,):
        raise ValueError(f"batch must have shape [N] = ({n},), got {tuple(batch.shape)}")
    if batch.device != device:
        raise ValueError(f"batch must be on q's device {device}, got {batch.device}")
    if num_graphs is not None:
        bounds = torch.arange(num_graphs + 1, device=device, dtype=batch.dtype)
        return torch.searchsorted(batch, bounds).long()
    if n == 0:
        return torch.zeros(1, dtype=torch.long, device=device)
    counts = torch.unique_consecutive(batch, return_counts=True)[1]
    return F.pad(counts.cumsum(0), (1, 0))


_PRECOMPILED_EVERYWHERE: bool | None = None


def _precompiled_engines_everywhere() -> bool:
    """:func:`cudnn_gnn.backends.precompiled_engines_everywhere` for the cuDNN mapped into this process, judged
    at the first call that finds one mapped (torch maps its own at import) and kept: it reads /proc/self/maps."""
    global _PRECOMPILED_EVERYWHERE
    if _PRECOMPILED_EVERYWHERE is None:
        from cudnn_gnn.backends import info

        paths = info.mapped_cudnn_libraries()
        if not paths:
            return False  # nothing to judge yet (or not Linux): flash, and ask again next call
        _PRECOMPILED_EVERYWHERE = info.precompiled_engines_everywhere(paths)
    return _PRECOMPILED_EVERYWHERE


def choose_backend(backend: str, device: torch.device, d: int, dv: int, p_dropout: float) -> str:
    """The backend that runs (host-only), the counterpart of :func:`cudnn_gnn.ops.plan.choose_backend`: the
    requested one, or for ``"auto"`` the rule in :func:`graph_attention`'s docstring. Raises RuntimeError for an
    explicit backend that cannot run here, NotImplementedError for one that cannot compute this call."""
    if backend == "reference":
        return "reference"
    if device.type != "cuda":
        if backend in ("cudnn", "flash"):
            raise RuntimeError(f"backend={backend!r} needs CUDA tensors, got tensors on {device}; use backend='reference'")
        return "reference"
    if backend == "flash":
        return "flash"
    from cudnn_gnn.backends import _cudnn_sdpa

    why_not = _cudnn_sdpa.supports(d, dv)
    if p_dropout >= 1:
        why_not = "dropout=1 drops every coefficient, which cuDNN's dropout (scaled by 1 / (1 - p)) cannot express"
    if backend == "auto":
        # cuDNN SDPA only where the cuDNN in use has its precompiled engines: without them its backward switches
        # cuDNN to JIT-only mode under the GAT kernels (docs/gpu-install.md)
        if why_not is None and backend_info().sdpa_available and _precompiled_engines_everywhere():
            return "cudnn"
        return "flash"
    info = backend_info()
    if not info.sdpa_available:
        raise RuntimeError(
            f"backend='cudnn' is unavailable: {info.reason or 'cudnn.pygraph missing'}. "
            f"Fix: {info.fix or 'pip install --no-deps -U nvidia-cudnn-frontend>=1.32'}"
        )
    if why_not is not None:
        raise NotImplementedError(f"backend='cudnn' cannot run this call: {why_not}; use backend='flash' or 'auto'")
    return "cudnn"


def _pad_index(ptr: Tensor, n: int, s: int) -> tuple[Tensor, Tensor, Tensor]:
    """Graph id and position (below ``s``) of each node, and the node count of each graph (device-side, no sync).
    Positions of a graph larger than ``s`` (a wrong ``max_num_nodes``, whose output is NaN) are clamped, not
    written out of range."""
    counts = ptr[1:] - ptr[:-1]
    graph = torch.repeat_interleave(torch.arange(counts.numel(), device=ptr.device), counts, output_size=n)
    pos = (torch.arange(n, device=ptr.device) - ptr[graph]).clamp(max=s - 1)
    return graph, pos, counts


def _to_padded(x: Tensor, graph: Tensor, pos: Tensor, b: int, s: int) -> Tensor:
    """``[N, H, D]`` -> ``[B, H, S, D]`` with zeros past each graph's nodes (differentiable)."""
    out = x.new_zeros(b, s, *x.shape[1:])
    out = out.index_put((graph, pos), x)
    return out.transpose(1, 2)


def _attention_reference(q: Tensor, k: Tensor, v: Tensor, ptr: Tensor, s: int, scale: float, p: float) -> Tensor:
    n = q.shape[0]
    graph, pos, counts = _pad_index(ptr, n, s)
    b = counts.numel()
    qd, kd, vd = (_to_padded(x, graph, pos, b, s) for x in (q, k, v))
    scores = torch.matmul(qd, kd.transpose(-1, -2)) * scale  # [B, H, S, S]
    key_valid = torch.arange(s, device=q.device) < counts[:, None]  # [B, S]
    # A finite fill, not -inf: padding rows of empty graphs stay NaN-free in forward and backward.
    scores = scores.masked_fill(~key_valid[:, None, None, :], torch.finfo(scores.dtype).min)
    attn = torch.softmax(scores, dim=-1)
    if p > 0:
        attn = F.dropout(attn, p=p, training=True)
    out = torch.matmul(attn, vd)  # [B, H, S, Dv]
    return out.transpose(1, 2)[graph, pos]


@functools.cache
def _varlen_attn(device_index: int) -> tuple[Callable[..., Tensor] | None, bool]:
    """``(varlen_attn, whether it takes scale=)``: torch's ``varlen_attn`` where it exists and runs on flash on
    CUDA device ``device_index`` (never on torch's cuDNN attention), else ``(None, False)``. Looked up once per
    device: the route check and the signature's inspection cost tens of microseconds, every call of a host-bound
    layer."""
    try:
        from torch.nn.attention import varlen
    except ImportError:
        return None, False
    fn = getattr(varlen, "varlen_attn", None)
    route = getattr(varlen, "_should_use_cudnn", None)
    if fn is None or (route is not None and route(device_index)):
        return None, False  # it would run SDPBackend.CUDNN_ATTENTION's kernel: see the module docstring
    return fn, "scale" in inspect.signature(fn).parameters


def _attention_torch_fused(q: Tensor, k: Tensor, v: Tensor, ptr: Tensor, s: int, scale: float, p: float) -> Tensor:
    d = q.shape[-1]
    fn, takes_scale = _varlen_attn(q.device.index if q.device.index is not None else torch.cuda.current_device()) \
        if p == 0 else (None, False)
    if fn is not None and d % 8 == 0 and d <= 256 and v.shape[-1] == d:
        out_dtype = q.dtype
        if q.dtype not in _FLASH_DTYPES:
            q, k, v = q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16)
        cu = ptr.to(torch.int32)
        kwargs = {}
        if takes_scale:
            kwargs["scale"] = scale
        elif not math.isclose(scale * math.sqrt(d), 1.0):
            q = q * (scale * math.sqrt(d))  # older varlen_attn has no scale= and uses 1/sqrt(D)
        out = fn(q.contiguous(), k.contiguous(), v.contiguous(), cu, cu, s, s, **kwargs)
        return out.to(out_dtype)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    n = q.shape[0]
    graph, pos, counts = _pad_index(ptr, n, s)
    b = counts.numel()
    qd, kd, vd = (_to_padded(x, graph, pos, b, s) for x in (q, k, v))
    mask = (torch.arange(s, device=q.device) < counts[:, None])[:, None, None, :]  # [B, 1, 1, S], True = attend
    # Never SDPBackend.CUDNN_ATTENTION (module docstring).
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask, dropout_p=p, scale=scale)
    return out.transpose(1, 2)[graph, pos]
