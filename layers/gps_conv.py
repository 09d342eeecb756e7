"""GPS graph transformer layer whose global attention runs on packed graphs (cuDNN SDPA), drop-in for PyG's."""

from __future__ import annotations  # noqa: I001 (ruff reads cudnn_gnn.layers as third-party; see report)

import inspect
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import BatchNorm1d, Dropout, Linear, Module, MultiheadAttention, Sequential
from torch_geometric.nn.inits import reset
from torch_geometric.nn.resolver import activation_resolver, normalization_resolver

from cudnn_gnn._validation import check_choice, check_int, check_probability
from cudnn_gnn.layers.graph_transformer import check_packed_mha, packed_mha
from cudnn_gnn.backends import ATTENTION_BACKENDS

__all__ = ["GPSConv"]


def _check_ptr_matches_batch(ptr: Tensor, batch: Tensor, n: int, values: bool) -> None:
    """``ptr`` ``[B + 1]`` and ``batch`` ``[N]`` describe the same graphs (``batch`` is ``i`` on ``ptr[i]:ptr[i+1]``):
    shapes always, values when ``values`` (one host sync)."""
    if batch.dim() != 1 or batch.numel() != n:
        raise ValueError(f"batch must have shape [N={n}] (one graph index per node), got {tuple(batch.shape)}")
    if ptr.dim() != 1 or ptr.numel() < 1:
        raise ValueError(f"ptr must have shape [B+1] with B >= 0, got {tuple(ptr.shape)}")
    if not values or n == 0:
        return
    counts = ptr[1:] - ptr[:-1]
    if bool((counts < 0).any()) or int(counts.sum()) != n:
        return  # not offsets: packed_mha's own check names what is wrong with ptr
    expected = torch.repeat_interleave(torch.arange(counts.numel(), device=ptr.device), counts.long(), output_size=n)
    if not torch.equal(expected.to(batch.device), batch.long()):
        raise ValueError(f"ptr and batch must describe the same graphs, got graph sizes {counts.tolist()[:8]} from ptr "
                         f"and {torch.bincount(batch.long().clamp(min=0)).tolist()[:8]} from batch")


def _batch_norm_module(norm: Module) -> BatchNorm1d | None:
    """The ``torch.nn.BatchNorm1d`` a norm is (PyG's ``BatchNorm`` wraps one as ``.module``), else None."""
    inner = getattr(norm, "module", norm)
    return inner if isinstance(inner, BatchNorm1d) else None


class _RowWeights(NamedTuple):
    """The rows a masked batch norm reads, from a ``node_mask`` ``[N]`` bool: ``weight`` ``[N, 1]`` float32 (1 kept,
    0 not), ``num_kept`` (0-dim float32, the rows kept) and ``divisor`` (``num_kept``, at least 1: what the mean and
    the variance divide by). Built once per forward, read by its three norms."""

    weight: Tensor
    num_kept: Tensor
    divisor: Tensor

    @classmethod
    def of(cls, mask: Tensor) -> _RowWeights:
        weight = mask.to(torch.float32)[:, None]
        num_kept = weight.sum()
        return cls(weight, num_kept, num_kept.clamp(min=1))


def _masked_batch_norm(bn: BatchNorm1d, x: Tensor, rows: _RowWeights) -> Tensor:
    """``bn`` in training mode with its statistics over the rows of ``x`` ``[N, C]`` that ``rows`` keeps:
    the same output on those rows as ``bn`` on them alone, and the same running-statistics update (momentum, or the
    cumulative average with ``momentum=None``; the unbiased variance). Fixed-shape ops, no host sync."""
    w, count, divisor = rows
    xf = x.float()
    mean = (xf * w).sum(0) / divisor
    var = ((xf - mean).square() * w).sum(0) / divisor
    if bn.training and bn.track_running_stats and bn.running_mean is not None and bn.running_var is not None:
        with torch.no_grad():
            bn.num_batches_tracked.add_(1)  # type: ignore[union-attr]
            momentum = (1.0 / bn.num_batches_tracked.float()) if bn.momentum is None else bn.momentum  # type: ignore[union-attr]
            unbiased = var * count / (count - 1).clamp(min=1)
            bn.running_mean.lerp_(mean.to(bn.running_mean.dtype), momentum)
            bn.running_var.lerp_(unbiased.to(bn.running_var.dtype), momentum)
    out = (xf - mean) * torch.rsqrt(var + bn.eps)
    if bn.affine:
        out = out * bn.weight + bn.bias
    return out.to(x.dtype)


class GPSConv(Module):
    r"""The GPS layer from `"Recipe for a General, Powerful, Scalable Graph Transformer"
    <https://arxiv.org/abs/2205.12454>`_ (Rampášek et al., 2022), as ``torch_geometric.nn.GPSConv``, with the
    global attention computed on the packed batch instead of a padded one.

    .. math::
        h_L &= \mathrm{Norm}_1\big(x + \mathrm{Dropout}(\mathrm{MPNN}(x, A))\big) \\
        h_G &= \mathrm{Norm}_2\big(x + \mathrm{Dropout}(\mathrm{MHA}_G(x))\big) \\
        out &= \mathrm{Norm}_3\big(h + \mathrm{MLP}(h)\big), \quad h = h_L + h_G

    :math:`\mathrm{MHA}_G` is ``self.attn`` (a ``torch.nn.MultiheadAttention``, so its parameters are PyG's)
    applied among the nodes of each graph through :func:`cudnn_gnn.graph_attention`: PyG pads
    every graph to the largest with ``to_dense_batch`` (memory and time ``B * max_n**2``); here graphs are packed
    (``sum n_b**2``) and, on a GPU with cuDNN >= 9.28, run on cuDNN's SDPA. Same constructor, parameter names and
    shapes, ``reset_parameters`` and ``__repr__`` as PyG 2.8, so ``load_state_dict(pyg_gps.state_dict(),
    strict=True)`` works and outputs match with equal weights (up to the attention backend's precision: cuDNN
    runs fp32 inputs in bf16).

    Args:
        channels: feature size ``C``.
        conv: the local message passing layer (any ``MessagePassing``, e.g. ``cudnn_gnn.layers.GATConv``), or
            None for a pure transformer.
        heads: attention heads (``C`` must be divisible by it).
        dropout: dropout of the intermediate embeddings (attention coefficients use ``attn_kwargs['dropout']``).
        act, act_kwargs: the MLP's activation (PyG's resolver).
        norm, norm_kwargs: the three normalizations (PyG's resolver, ``"batch_norm"`` by default).
        attn_type: ``"multihead"``; ``"performer"`` raises NotImplementedError (use PyG's GPSConv for it).
        attn_kwargs: passed to ``torch.nn.MultiheadAttention`` (``dropout``, ``bias``, ...); ``add_bias_kv=True``,
            ``add_zero_attn=True`` and ``kdim`` / ``vdim`` other than ``channels`` raise NotImplementedError (PyG
            runs the first two; its forward fails on the third).
        attention_backend: ``"auto" | "cudnn" | "flash" | "reference"`` (keyword only).

    Shapes:
        - input: ``x`` ``[N, C]``, ``edge_index`` ``[2, E]`` or a sparse adjacency, ``batch`` ``[N]`` (sorted)
        - output: ``[N, C]``
    """

    def __init__(
        self,
        channels: int,
        conv: Module | None,
        heads: int = 1,
        dropout: float = 0.0,
        act: str = "relu",
        act_kwargs: dict[str, Any] | None = None,
        norm: str | None = "batch_norm",
        norm_kwargs: dict[str, Any] | None = None,
        attn_type: str = "multihead",
        attn_kwargs: dict[str, Any] | None = None,
        *,
        attention_backend: str = "auto",
    ) -> None:
        super().__init__()
        check_int("channels", channels, minimum=1)
        check_int("heads", heads, minimum=1)
        check_probability("dropout", dropout, allow_one=True)  # 1.0 as in PyG and torch: all dropped
        check_choice("attention_backend", attention_backend, ATTENTION_BACKENDS)
        if attn_type == "performer":
            raise NotImplementedError(
                "attn_type='performer' is not implemented by cudnn_gnn.layers.GPSConv (its packed path is exact "
                "softmax attention); use torch_geometric.nn.GPSConv for Performer attention"
            )
        if attn_type != "multihead":
            raise ValueError(f"attn_type must be 'multihead', got {attn_type!r}")
        if channels % heads:
            raise ValueError(f"channels must be divisible by heads={heads}, got {channels}")

        self.channels = channels
        self.conv = conv
        self.heads = heads
        self.dropout = dropout
        self.attn_type = attn_type
        self.attention_backend = attention_backend

        self.attn: MultiheadAttention = MultiheadAttention(channels, heads, batch_first=True, **(attn_kwargs or {}))
        check_packed_mha(self.attn)

        self.mlp = Sequential(
            Linear(channels, channels * 2),
            activation_resolver(act, **(act_kwargs or {})),
            Dropout(dropout),
            Linear(channels * 2, channels),
            Dropout(dropout),
        )
        norm_kwargs = norm_kwargs or {}
        self.norm1 = normalization_resolver(norm, channels, **norm_kwargs)
        self.norm2 = normalization_resolver(norm, channels, **norm_kwargs)
        self.norm3 = normalization_resolver(norm, channels, **norm_kwargs)
        self.norm_with_batch = self.norm1 is not None and "batch" in inspect.signature(self.norm1.forward).parameters

    def reset_parameters(self) -> None:
        """Resets all learnable parameters of the module."""
        if self.conv is not None:
            reset(self.conv)  # calls its reset_parameters(), as PyG's GPSConv does
        self.attn._reset_parameters()
        reset(self.mlp)
        for norm in (self.norm1, self.norm2, self.norm3):
            if norm is not None:
                norm.reset_parameters()

    @staticmethod
    def _batch_statistics_norm(norm: Module | None) -> BatchNorm1d | None:
        """The batch norm ``norm`` is where it normalises with batch statistics (the ones a ``node_mask`` masks)."""
        bn = None if norm is None else _batch_norm_module(norm)
        return bn if bn is not None and (bn.training or not bn.track_running_stats) else None

    def _norm(self, norm: Module | None, h: Tensor, batch: Tensor | None, rows: _RowWeights | None) -> Tensor:
        if norm is None:
            return h
        bn = self._batch_statistics_norm(norm)
        if rows is not None and bn is not None:
            return _masked_batch_norm(bn, h, rows)
        return norm(h, batch=batch) if self.norm_with_batch else norm(h)

    def forward(
        self,
        x: Tensor,
        edge_index: Any,
        batch: Tensor | None = None,
        *,
        ptr: Tensor | None = None,
        max_num_nodes: int | None = None,
        node_mask: Tensor | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """Runs the layer. ``kwargs`` go to ``conv`` (e.g. ``edge_attr``). ``ptr`` (PyG's ``data.ptr``) and
        ``max_num_nodes``, given once per batch, spare the attention its host syncs; ``batch`` still feeds
        normalizations that take it. ``node_mask`` (``[N]`` bool, e.g. a packed batch's
        :attr:`~cudnn_gnn.apps.static_batcher.StaticGraphBatch.token_valid`): batch norms (PyG's ``BatchNorm`` or
        ``torch.nn.BatchNorm1d``) compute their batch statistics, and update their running ones, over the rows it
        keeps only (padding rows are normalised too, and reach nothing); other norms ignore it.
        Given both, ``ptr`` and ``batch`` must describe the same graphs: checked
        (``ValueError``) wherever the forward syncs anyway (on a CPU, or without ``max_num_nodes``); on CUDA with
        ``max_num_nodes`` only their shapes are, since comparing the values would cost a host sync."""
        if ptr is not None and batch is not None:
            _check_ptr_matches_batch(ptr, batch, x.size(0), max_num_nodes is None or x.device.type != "cuda")
        rows = None  # the masked norms' row weights, built once for the three
        if node_mask is not None and any(self._batch_statistics_norm(n) is not None
                                         for n in (self.norm1, self.norm2, self.norm3)):
            rows = _RowWeights.of(node_mask)
        hs = []
        if self.conv is not None:  # local message passing
            h = self.conv(x, edge_index, **kwargs)
            h = F.dropout(h, p=self.dropout, training=self.training)
            hs.append(self._norm(self.norm1, h + x, batch, rows))

        # Global attention within each graph, on the packed batch.
        h = packed_mha(
            self.attn,
            x,
            ptr=ptr,
            batch=batch,
            num_graphs=None,
            max_num_nodes=max_num_nodes,
            training=self.training,
            backend=self.attention_backend,
        )
        h = F.dropout(h, p=self.dropout, training=self.training)
        hs.append(self._norm(self.norm2, h + x, batch, rows))

        out = hs[0] if len(hs) == 1 else hs[0] + hs[1]
        out = out + self.mlp(out)
        return self._norm(self.norm3, out, batch, rows)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, conv={self.conv}, heads={self.heads}, attn_type={self.attn_type})"
