"""Swap PyG's ``GATConv``/``GATv2Conv`` inside a built model for ours (:func:`convert`) and back (:func:`to_pyg`)."""

from __future__ import annotations

import copy
from typing import Any

from torch import nn
from torch.nn.parameter import UninitializedParameter

from cudnn_gnn._validation import check_bool

from ._common import check_knobs
from .gat_conv import GATConv
from .gatv2_conv import GATv2Conv

__all__ = ["convert", "to_pyg"]

_GAT_ARGS = ("in_channels", "out_channels", "heads", "concat", "negative_slope", "dropout", "add_self_loops",
             "edge_dim", "fill_value", "residual")
_V2_ARGS = (*_GAT_ARGS, "share_weights")


def _pairs() -> list[tuple[type, type, tuple[str, ...]]]:
    from torch_geometric.nn import GATConv as PygGATConv
    from torch_geometric.nn import GATv2Conv as PygGATv2Conv

    return [(PygGATConv, GATConv, _GAT_ARGS), (PygGATv2Conv, GATv2Conv, _V2_ARGS)]


def _hook_dicts(m: nn.Module) -> list[str]:
    """The names of ``m``'s hook registries: ``nn.Module``'s forward (pre-), backward and state-dict hooks and
    ``MessagePassing``'s propagate / message / aggregate / edge-update hooks (every attribute named ``*hook*``)."""
    return [k for k in vars(m) if "hook" in k]


def _rebuild(name: str, old: nn.Module, new_cls: type, args: tuple[str, ...], knobs: dict[str, Any]) -> nn.Module:
    where = name or "model"
    for p in old.parameters():
        if isinstance(p, UninitializedParameter):
            raise ValueError(
                f"{where} ({type(old).__name__}) must have initialised parameters to be converted, got a lazy "
                "(in_channels=-1) module that has not run yet; run one forward pass first"
            )
    if getattr(old, "aggr", "add") not in ("add", "sum") or getattr(old, "flow", "source_to_target") != "source_to_target":
        raise NotImplementedError(
            f"{where} must use aggr='add' and flow='source_to_target' to be converted, got "
            f"aggr={old.aggr!r}, flow={old.flow!r}"
        )
    kwargs = {a: getattr(old, a) for a in args}
    kwargs["bias"] = old.bias is not None
    new = new_cls(**kwargs, **knobs)
    new.load_state_dict(old.state_dict(), strict=True)  # checks that names and shapes match one to one
    _carry(where, old, new)
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


def _swap(model: nn.Module, table: dict[type, tuple[type, tuple[str, ...]]], knobs: dict[str, Any],
          inplace: bool) -> nn.Module:
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
            done[id(m)] = _rebuild(name, m, hit[0], hit[1], knobs)
        return done[id(m)]

    root = new_for("", model)
    if root is not None:
        return root
    for parent_name, parent in list(model.named_modules(remove_duplicate=False)):
        # _modules, not named_children(): that skips a module a parent holds under a second name
        for child_name, child in list(parent._modules.items()):
            if child is None:
                continue
            full = f"{parent_name}.{child_name}" if parent_name else child_name
            new = new_for(full, child)
            if new is not None:
                parent._modules[child_name] = new
    return model


def convert(
    model: nn.Module,
    *,
    backend: str = "auto",
    deterministic: bool = False,
    grad_precision: str = "auto",
    cache_graph: bool = True,
    inplace: bool = True,
) -> nn.Module:
    """Replace every PyG ``GATConv`` / ``GATv2Conv`` in ``model`` by cudnn_gnn's, weights carried over.

    Only modules whose type is exactly PyG's class are replaced (a subclass may override the math). The new
    layers get the old ones' hyperparameters and their very submodules, ``Parameter`` objects and buffers (so
    ``requires_grad``, device, dtype, tied or shared weights and an optimizer's references are kept), their
    train/eval mode and their hooks (forward and forward-pre, in order, backward, and ``MessagePassing``'s),
    plus the given knobs. One conv held under two names becomes one new conv under both.

    Returns the converted model: ``model`` itself, its convs swapped in place, so that an optimizer built before
    (the usual PyG order: model, optimizer, then ``model = convert(model)``) keeps training the same parameters. A
    model that *is* a conv comes back as the new conv, holding the old one's parameters. ``inplace=False`` converts
    a deep copy and leaves ``model`` as it was: new parameter objects, which an optimizer built before does not hold.

    Raises:
        ValueError: a lazy layer (``in_channels=-1``) has not run yet, so it has no weights to carry.
        NotImplementedError: a layer uses ``aggr`` other than ``'add'`` or ``flow='target_to_source'``.

    Example:
        >>> import torch, cudnn_gnn
        >>> from torch_geometric.nn import GAT
        >>> model = cudnn_gnn.convert(GAT(8, 16, num_layers=2, out_channels=3))
        >>> model(torch.randn(4, 8), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
        torch.Size([4, 3])
    """
    check_knobs(backend, deterministic, grad_precision, cache_graph)
    knobs = {"backend": backend, "deterministic": deterministic, "grad_precision": grad_precision,
             "cache_graph": cache_graph}
    table = {pyg: (ours, args) for pyg, ours, args in _pairs()}
    return _swap(model, table, knobs, inplace)


def to_pyg(model: nn.Module, *, inplace: bool = True) -> nn.Module:
    """The reverse of :func:`convert`: our ``GATConv`` / ``GATv2Conv`` back to PyG's (for export, TorchScript,
    explainers or machines without cudnn_gnn). Same rules and return as :func:`convert`."""
    table = {ours: (pyg, args) for pyg, ours, args in _pairs()}
    return _swap(model, table, {}, inplace)
