"""Swap PyG's ``GATConv``/``GATv2Conv``/``GPSConv`` inside a built model for ours (:func:`convert`) and back
(:func:`to_pyg`)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from torch import nn
from torch.nn.parameter import UninitializedParameter

from cudnn_gnn._names import ATTENTION_BACKENDS
from cudnn_gnn._validation import check_bool, check_choice

from ._common import check_knobs
from .gat_conv import GATConv
from .gatv2_conv import GATv2Conv
from .gps_conv import GPSConv
from .graph_transformer import check_packed_mha

__all__ = ["convert", "to_pyg"]

_GAT_ARGS = ("in_channels", "out_channels", "heads", "concat", "negative_slope", "dropout", "add_self_loops",
             "edge_dim", "fill_value", "residual")
_V2_ARGS = (*_GAT_ARGS, "share_weights")


_GPS_MODULES = ("conv", "attn", "mlp", "norm1", "norm2", "norm3")

#: ``build(where, old, new_cls, knobs) -> new``: the new layer with ``old``'s hyperparameters (its submodules,
#: parameters, buffers, mode and hooks are then carried over by :func:`_carry`).
_Build = Callable[[str, nn.Module, type, dict[str, Any]], nn.Module]


def _pairs() -> list[tuple[type, type, _Build]]:
    """``(PyG class, our class, build)``: every layer :func:`convert` swaps and :func:`to_pyg` swaps back."""
    from torch_geometric.nn import GATConv as PygGATConv
    from torch_geometric.nn import GATv2Conv as PygGATv2Conv
    from torch_geometric.nn import GPSConv as PygGPSConv

    return [(PygGATConv, GATConv, _conv_builder(_GAT_ARGS)), (PygGATv2Conv, GATv2Conv, _conv_builder(_V2_ARGS)),
            (PygGPSConv, GPSConv, _build_gps)]


def _hook_dicts(m: nn.Module) -> list[str]:
    """The names of ``m``'s hook registries: ``nn.Module``'s forward (pre-), backward and state-dict hooks and
    ``MessagePassing``'s propagate / message / aggregate / edge-update hooks (every attribute named ``*hook*``)."""
    return [k for k in vars(m) if "hook" in k]


def _conv_builder(args: tuple[str, ...]) -> _Build:
    """The build of a GAT/GATv2 conv: its constructor arguments ``args`` read off the old conv, plus the knobs."""

    def build(where: str, old: nn.Module, new_cls: type, knobs: dict[str, Any]) -> nn.Module:
        for p in old.parameters():
            if isinstance(p, UninitializedParameter):
                raise ValueError(
                    f"{where} ({type(old).__name__}) must have initialised parameters to be converted, got a lazy "
                    "(in_channels=-1) module that has not run yet; run one forward pass first"
                )
        if (getattr(old, "aggr", "add") not in ("add", "sum")
                or getattr(old, "flow", "source_to_target") != "source_to_target"):
            raise NotImplementedError(
                f"{where} must use aggr='add' and flow='source_to_target' to be converted, got "
                f"aggr={old.aggr!r}, flow={old.flow!r}"
            )
        kwargs = {a: getattr(old, a) for a in args}
        kwargs["bias"] = old.bias is not None
        new = new_cls(**kwargs, **knobs)
        new.load_state_dict(old.state_dict(), strict=True)  # checks that names and shapes match one to one
        return new

    return build


def _build_gps(where: str, old: nn.Module, new_cls: type, knobs: dict[str, Any]) -> nn.Module:
    """A GPS layer: built bare (no norms), then given the old layer's modules themselves, so whatever activation,
    norms, local conv and attention options it was built with carry over (its local conv is swapped by the walk,
    like any other)."""
    if old.attn_type != "multihead":
        raise NotImplementedError(f"{where} ({type(old).__name__}) must use attn_type='multihead' to be converted, "
                                  f"got {old.attn_type!r}")
    try:
        check_packed_mha(old.attn)  # type: ignore[arg-type]  # attn_type "multihead": an nn.MultiheadAttention
    except NotImplementedError as exc:
        raise NotImplementedError(f"{where} ({type(old).__name__}) cannot be converted: {exc}") from None
    new = new_cls(old.channels, None, heads=old.heads, dropout=old.dropout, norm=None, **knobs)
    for name in _GPS_MODULES:  # nn.Module.__setattr__ files a module (or None) under _modules, as the old layer has it
        setattr(new, name, getattr(old, name))
    new.norm_with_batch = old.norm_with_batch
    return new


def _carry(where: str, old: nn.Module, new: nn.Module) -> None:
    """Give ``new`` the objects of ``old`` rather than copies of their values, so that converting changes nothing
    but the class: the same submodules (so one shared with another part of the model, or between two convs, stays
    shared, with its own hooks and train/eval mode), the same ``Parameter`` objects (``requires_grad``, device,
    dtype, an optimizer's references and tied parameters kept) and buffers, the conv's own train/eval mode (not
    pushed down to its children), and its hook registries themselves (every forward (pre-)hook, in order, and a
    handle the caller holds still removes it)."""
    for reg in ("_modules", "_parameters", "_buffers"):
        src, dst = getattr(old, reg), getattr(new, reg)
        if set(src) != set(dst):  # load_state_dict(strict) passed, so only a None slot or a module can differ
            raise NotImplementedError(
                f"{where} ({type(old).__name__}) must have the {reg[1:]} {sorted(dst)} to be converted to "
                f"{type(new).__name__}, got {sorted(src)}"
            )
        for key, obj in src.items():
            if reg == "_modules" and obj is not None and dst[key] is not None and type(obj) is not type(dst[key]):
                raise NotImplementedError(f"{where}.{key} must be a {type(dst[key]).__name__} to be converted, got "
                                          f"{type(obj).__name__}")
            dst[key] = obj
    new._non_persistent_buffers_set = set(old._non_persistent_buffers_set)
    new.training = old.training
    for reg in _hook_dicts(old):
        if reg not in vars(new):
            raise NotImplementedError(f"{where} ({type(old).__name__}) has hook registry {reg} that "
                                      f"{type(new).__name__} lacks, so its hooks cannot be carried")
        setattr(new, reg, getattr(old, reg))


def _swap(model: nn.Module, table: dict[type, tuple[type, _Build, dict[str, Any]]], inplace: bool) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    check_bool("inplace", inplace)
    if not inplace:
        model = copy.deepcopy(model)
    done: dict[int, nn.Module] = {}  # a module shared under two names stays shared

    def new_for(name: str, m: nn.Module) -> nn.Module | None:
        hit = table.get(type(m))
        if hit is None:
            return None
        if id(m) not in done:
            where = name or "model"
            new_cls, build, knobs = hit
            new = build(where, m, new_cls, knobs)
            _carry(where, m, new)
            done[id(m)] = new
        return done[id(m)]

    new_for("", model)
    for parent_name, parent in list(model.named_modules(remove_duplicate=False)):
        # a parent swapped already (a GPS layer) gets its new children in the new module
        owner = done.get(id(parent), parent)
        # _modules, not named_children(): that skips a module a parent holds under a second name
        for child_name, child in list(parent._modules.items()):
            if child is None:
                continue
            full = f"{parent_name}.{child_name}" if parent_name else child_name
            new = new_for(full, child)
            if new is not None:
                owner._modules[child_name] = new
    return done.get(id(model), model)


def convert(
    model: nn.Module,
    *,
    backend: str = "auto",
    deterministic: bool = False,
    grad_precision: str = "auto",
    cache_graph: bool = True,
    attention_backend: str = "auto",
    inplace: bool = True,
) -> nn.Module:
    """Replace every PyG ``GATConv`` / ``GATv2Conv`` / ``GPSConv`` in ``model`` by cudnn_gnn's, weights carried over.

    Only modules whose type is exactly PyG's class are replaced (a subclass may override the math). The new
    layers get the old ones' hyperparameters and their very submodules, ``Parameter`` objects and buffers (so
    ``requires_grad``, device, dtype, tied or shared weights and an optimizer's references are kept), their
    train/eval mode and their hooks (forward and forward-pre, in order, backward, and ``MessagePassing``'s),
    plus the given knobs (``backend``, ``deterministic``, ``grad_precision``, ``cache_graph`` go to the GAT/GATv2
    convs, ``attention_backend`` to the GPS layers, whose local conv is converted too). One conv held under two
    names becomes one new conv under both.

    Returns the converted model: ``model`` itself, its convs swapped in place, so that an optimizer built before
    (the usual PyG order: model, optimizer, then ``model = convert(model)``) keeps training the same parameters. A
    model that *is* a conv comes back as the new conv, holding the old one's parameters. ``inplace=False`` converts
    a deep copy and leaves ``model`` as it was: new parameter objects, which an optimizer built before does not hold.

    Raises:
        ValueError: a lazy layer (``in_channels=-1``) has not run yet, so it has no weights to carry.
        NotImplementedError: a layer uses ``aggr`` other than ``'add'`` or ``flow='target_to_source'``; a GPS layer
            uses Performer attention or ``nn.MultiheadAttention`` options the packed attention lacks.

    Example:
        >>> import torch, cudnn_gnn
        >>> from torch_geometric.nn import GAT
        >>> model = cudnn_gnn.convert(GAT(8, 16, num_layers=2, out_channels=3))
        >>> model(torch.randn(4, 8), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
        torch.Size([4, 3])
    """
    check_knobs(backend, deterministic, grad_precision, cache_graph)
    check_choice("attention_backend", attention_backend, ATTENTION_BACKENDS)
    knobs: dict[str, Any] = {"backend": backend, "deterministic": deterministic, "grad_precision": grad_precision,
                             "cache_graph": cache_graph}
    table = {pyg: (ours, build, {"attention_backend": attention_backend} if ours is GPSConv else knobs)
             for pyg, ours, build in _pairs()}
    return _swap(model, table, inplace)


def to_pyg(model: nn.Module, *, inplace: bool = True) -> nn.Module:
    """The reverse of :func:`convert`: our ``GATConv`` / ``GATv2Conv`` / ``GPSConv`` back to PyG's (for export,
    TorchScript, explainers or machines without cudnn_gnn). Same rules and return as :func:`convert`."""
    table: dict[type, tuple[type, _Build, dict[str, Any]]] = {ours: (pyg, build, {}) for pyg, ours, build in _pairs()}
    return _swap(model, table, inplace)
