"""Under Triton's interpreter: the launches of one GAT training call (no attention returned, dropout 0.6) on Cora's
and CiteSeer's self-loop graphs at their second layer's shapes (1 x 7, 1 x 6); the CachedLaunch key of each kernel's
launch before the fix (args_key + keywords) and after it (+ positional constexpr values)."""
import inspect
import os

os.environ["TRITON_INTERPRET"] = "1"
import sys

sys.path.insert(0, "tests")
import torch
from conftest import call_spec
from torch_geometric.utils import add_self_loops

from cudnn_gnn import CscGraph
from cudnn_gnn.backends import triton as tb
from cudnn_gnn.backends.triton import kernels as tk
from cudnn_gnn.backends.triton.launch import args_key
from cudnn_gnn.datasets import load_planetoid

rec = []
class Rec:
    def __init__(self, fn, name): self.fn, self.name = fn, name
    def __getitem__(self, grid):
        def go(*args, **kwargs):
            rec.append((self.name, args, kwargs))
            return self.fn[grid](*args, **kwargs)
        return go
for m in tk.KERNEL_MODULES:
    for n, v in list(vars(m).items()):
        if n.endswith("_kernel") and hasattr(v, "__getitem__") and not isinstance(v, type):
            setattr(m, n, Rec(v, n))

def launches(name, c):
    d = load_planetoid(name, None, normalize_features=True)[0]
    ei, _ = add_self_loops(d.edge_index, num_nodes=d.num_nodes)
    g = CscGraph.from_edge_index(ei, num_nodes=d.num_nodes)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(d.num_nodes, c, generator=gen).requires_grad_()
    w = (torch.randn(2 * c, generator=gen) * 0.3).requires_grad_()
    spec = call_spec(g, x, x, w, v2=False, heads=1, concat=True, dropout=0.6, dropout_seed=torch.tensor([7]))
    rec.clear()
    out, _ = tb.triton_gat(spec)
    out.sum().backward()
    return list(rec)


def constexpr_positions(name):
    for m in tk.KERNEL_MODULES:
        if hasattr(m, name):
            fn = getattr(m, name).fn
            f = getattr(fn, "fn", fn)
            params = inspect.signature(f).parameters
            return [i for i, p in enumerate(params.values()) if "constexpr" in str(p.annotation)]

cora, cite = launches("Cora", 7), launches("CiteSeer", 6)
for (n1, a1, k1), (n2, a2, k2) in zip(cora, cite):
    assert n1 == n2
    old1, old2 = (args_key(a1), tuple(k1.items())), (args_key(a2), tuple(k2.items()))
    pos = constexpr_positions(n1)
    new1 = old1 + (tuple(a1[i] for i in pos if i < len(a1)),)
    new2 = old2 + (tuple(a2[i] for i in pos if i < len(a2)),)
    print(f"{n1:28s} old key {'SAME' if old1 == old2 else 'differs'}; new key {'SAME' if new1 == new2 else 'differs'}; "
          f"positional constexprs {[ (i, a1[i], a2[i]) for i in pos if i < len(a1)]}")
