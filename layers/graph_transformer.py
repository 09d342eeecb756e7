"""A transformer encoder block over packed graphs: global attention within each graph, no padding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.nn.functional as F
from torch import Tensor
from torch.nn import Dropout, LayerNorm, Linear, Module, MultiheadAttention

from cudnn_gnn._validation import check_bool, check_choice, check_int, check_probability
from cudnn_gnn.backends import ATTENTION_BACKENDS
from cudnn_gnn.ops import graph_attention

__all__ = ["GraphTransformerBlock"]

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu}


def check_packed_mha(attn: MultiheadAttention) -> None:
    """Refuse ``nn.MultiheadAttention`` options the packed path does not implement."""
    if attn.bias_k is not None or attn.add_zero_attn:
        raise NotImplementedError("attn_kwargs add_bias_kv=True / add_zero_attn=True are not supported by the packed attention; "
                                  "use torch_geometric.nn.GPSConv for them")
    if not attn._qkv_same_embed_dim:
        raise NotImplementedError("attn_kwargs kdim/vdim different from channels are not supported by the packed attention")


def packed_mha(
    attn: MultiheadAttention,
    x: Tensor,
    *,
    ptr: Tensor | None,
    batch: Tensor | None,
    num_graphs: int | None,
    max_num_nodes: int | None,
    training: bool,
    backend: str,
) -> Tensor:
    """Self-attention of ``nn.MultiheadAttention`` ``attn`` (its own weights, dropout and heads) within each graph.

    Equals ``attn(h, h, h, key_padding_mask=~mask)`` on ``h, mask = to_dense_batch(x, batch)`` gathered back to
    ``[N, C]``, without materializing the padded batch.
    """
    n, c = x.shape
    h = attn.num_heads
    qkv = F.linear(x, attn.in_proj_weight, attn.in_proj_bias).view(n, 3, h, c // h)
    q, k, v = qkv.unbind(1)
    out = graph_attention(
        q,
        k,
        v,
        ptr,
        batch=None if ptr is not None else batch,
        num_graphs=num_graphs,
        max_num_nodes=max_num_nodes,
        dropout=attn.dropout,
        training=training,
        backend=backend,
    )
    return attn.out_proj(out.reshape(n, c))


class GraphTransformerBlock(Module):
    r"""A transformer encoder layer whose attention runs among the nodes of each graph of a packed batch.

    Pre-norm (``norm_first=True``, the default):

    .. math::
        x &\leftarrow x + \mathrm{Dropout}(\mathrm{MHA}_G(\mathrm{LN}_1(x))) \\
        x &\leftarrow x + \mathrm{Dropout}(W_2\, \mathrm{Dropout}(\sigma(W_1 \mathrm{LN}_2(x))))

    post-norm applies each LayerNorm after its residual sum instead. :math:`\mathrm{MHA}_G` is multi-head
    attention restricted to each graph (:func:`cudnn_gnn.graph_attention`: cuDNN SDPA on
    packed nodes where available). Parameters are named and shaped as in ``torch.nn.TransformerEncoderLayer``
    (``self_attn``, ``linear1``, ``linear2``, ``norm1``, ``norm2``), whose ``state_dict`` loads with
    ``strict=True``; the block then equals that layer applied to each graph on its own.

    Args:
        channels: feature size ``C`` (a multiple of ``heads``).
        heads: attention heads.
        dropout: dropout of the attention coefficients, the residual branches and the feed-forward hidden layer.
        dim_feedforward: hidden size of the feed-forward network (default ``2 * channels``).
        activation: ``"relu"`` or ``"gelu"``.
        norm_first: pre-norm (True) or post-norm (False).
        layer_norm_eps: LayerNorm epsilon.
        bias: biases in the linear layers and LayerNorms.
        attention_backend: ``"auto" | "cudnn" | "flash" | "reference"`` for the attention.

    Shapes:
        - input: ``x`` ``[N, C]``, ``batch`` ``[N]`` (sorted) or ``ptr`` ``[B+1]``
        - output: ``[N, C]``
    """

    def __init__(
        self,
        channels: int,
        heads: int,
        dropout: float = 0.0,
        *,
        dim_feedforward: int | None = None,
        activation: str = "relu",
        norm_first: bool = True,
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
        attention_backend: str = "auto",
    ) -> None:
        super().__init__()
        check_int("channels", channels, minimum=1)
        check_int("heads", heads, minimum=1)
        if channels % heads:
            raise ValueError(f"channels must be divisible by heads={heads}, got {channels}")
        dropout = check_probability("dropout", dropout, allow_one=True)  # 1.0 as in torch's encoder layer
        check_choice("activation", activation, tuple(_ACTIVATIONS))
        check_bool("norm_first", norm_first)
        check_choice("attention_backend", attention_backend, ATTENTION_BACKENDS)
        hidden = 2 * channels if dim_feedforward is None else check_int("dim_feedforward", dim_feedforward, minimum=1)
        self.channels, self.heads, self.norm_first = channels, heads, norm_first
        self.activation, self.attention_backend = activation, attention_backend
        self.self_attn = MultiheadAttention(channels, heads, dropout=dropout, bias=bias, batch_first=True)
        self.linear1 = Linear(channels, hidden, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(hidden, channels, bias=bias)
        self.norm1 = LayerNorm(channels, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(channels, eps=layer_norm_eps, bias=bias)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)

    def reset_parameters(self) -> None:
        self.self_attn._reset_parameters()
        for m in (self.linear1, self.linear2, self.norm1, self.norm2):
            m.reset_parameters()

    def _attention(self, x: Tensor, **graph: Any) -> Tensor:
        out = packed_mha(self.self_attn, x, training=self.training, backend=self.attention_backend, **graph)
        return self.dropout1(out)

    def _feedforward(self, x: Tensor) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(_ACTIVATIONS[self.activation](self.linear1(x)))))

    def forward(
        self,
        x: Tensor,
        batch: Tensor | None = None,
        *,
        ptr: Tensor | None = None,
        num_graphs: int | None = None,
        max_num_nodes: int | None = None,
    ) -> Tensor:
        """Args as in :func:`~cudnn_gnn.graph_attention`; pass ``ptr`` (PyG's ``data.ptr``)
        and ``max_num_nodes`` once per batch to avoid host syncs. ``ptr`` wins over ``batch``."""
        graph = {"ptr": ptr, "batch": batch, "num_graphs": num_graphs, "max_num_nodes": max_num_nodes}
        if self.norm_first:
            x = x + self._attention(self.norm1(x), **graph)
            return x + self._feedforward(self.norm2(x))
        x = self.norm1(x + self._attention(x, **graph))
        return self.norm2(x + self._feedforward(x))

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.channels}, heads={self.heads}, norm_first={self.norm_first}, "
            f"attention_backend={self.attention_backend!r})"
        )
