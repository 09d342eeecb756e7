"""What the Triton kernels of every pass share: reductions, the logit activations and their derivatives, the head
group of a program (:func:`_head_group`), the COO ids of CSC positions (:func:`_coo_ids`), edge rows and logits,
work items, the attention's normalisation, and the hub merges (a sum of partial slots in slot order)."""


from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from cudnn_gnn.backends.triton import tuning
from cudnn_gnn.backends.triton.call import GatCall, Gatv2Call, KernelDropout
from cudnn_gnn.backends.triton.launch import cached_launch

__all__ = ["ACTIVATION_CODES", "n_items"]


ACTIVATION_CODES = {"linear": 0, "leaky_relu": 1, "relu": 2, "sigmoid": 3, "tanh": 4, "elu": 5, "scalar": 6}


# tl.sum / tl.max / tl.zeros are themselves @triton.jit functions of triton.language.standard, decorated when triton
# is first imported; if that happened before TRITON_INTERPRET=1 was set (torch_geometric imports triton), the
# interpreter cannot call them. The builtins below work either way, compile to the same reductions, and the
# interpreter recognises the standard combine functions and reduces with numpy.
@triton.jit
def _sum(x, axis: tl.constexpr):
    return tl.reduce(x, axis, tl.standard._sum_combine)


@triton.jit
def _max(x, axis: tl.constexpr):
    return tl.reduce(x, axis, tl.standard._elementwise_max)


@triton.jit
def _idx(x, I64: tl.constexpr):
    """``x`` (an index: a program id, a row, a CSC position, a work item's field) in the width the kernels compute
    offsets in: int64 where ``I64``, else int32. ``I64`` is the call's
    (:func:`~cudnn_gnn.backends.triton.tuning.int64_offsets`): int32 offsets wherever every tensor a kernel indexes,
    with a pad of rows for masked lanes, stays below 2**31 elements, so no offset of any lane overflows; they take half
    the registers of int64 ones (an int64 offset is two registers a lane, its multiply several instructions). Two
    kernels take int64 anyway on the tiles where it measured faster
    (:func:`~cudnn_gnn.backends.triton.tuning.kernel_int64_offsets`)."""
    if I64:
        y = x.to(tl.int64)
    else:
        y = x.to(tl.int32)
    return y


@triton.jit
def _act(z, ACT: tl.constexpr, alpha):
    if ACT == 1:
        y = tl.where(z > 0, z, z * alpha)
    elif ACT == 2:
        y = tl.maximum(z, 0.0)
    elif ACT == 3:
        y = 1.0 / (1.0 + tl.exp(-z))
    elif ACT == 4:
        y = 2.0 / (1.0 + tl.exp(-2.0 * z)) - 1.0
    elif ACT == 5:
        y = tl.where(z > 0, z, tl.exp(tl.minimum(z, 0.0)) - 1.0)
    elif ACT == 6:
        y = z * alpha
    else:
        y = z
    return y


@triton.jit
def _act_grad(z, ACT: tl.constexpr, alpha):
    """d act(z) / dz, with torch's choice at the kinks (leaky_relu and relu: the negative side at 0)."""
    if ACT == 1:
        d = tl.where(z > 0, 1.0, alpha)
    elif ACT == 2:
        d = tl.where(z > 0, 1.0, 0.0)
    elif ACT == 3:
        s = 1.0 / (1.0 + tl.exp(-z))
        d = s * (1.0 - s)
    elif ACT == 4:
        t = 2.0 / (1.0 + tl.exp(-2.0 * z)) - 1.0
        d = 1.0 - t * t
    elif ACT == 5:
        d = tl.where(z > 0, 1.0, tl.exp(tl.minimum(z, 0.0)))
    elif ACT == 6:
        d = alpha + 0.0 * z
    else:
        d = 1.0 + 0.0 * z
    return d


# GAT's backward with one row gather per edge (see launch_gat_backward): a delta pass over the destinations (dense
# over the rows of dout and out; per edge [E, H] data only for a gradient on the attention), the source pass (dout_i
# gathered per out-edge, x_j loaded once per source), and a destination sum over the [E, H] buffer the source pass
# wrote (a segmented sum in CSC order). No program reads back what it stored itself: no barriers needed.
@triton.jit
def _head_group(H, C, HG: tl.constexpr, BLOCK_C: tl.constexpr, I64: tl.constexpr):
    """The program's head group (axis 1 of the grid): ``h_off [HG]`` (:func:`_idx`'s width), its mask, the feature offsets
    ``hc [HG, BLOCK_C] = h * C + c`` and their mask."""
    h_off = _idx(tl.program_id(1), I64) * HG + tl.arange(0, HG)
    hm = h_off < H
    c_off = tl.arange(0, BLOCK_C)
    return h_off, hm, h_off[:, None] * C + c_off[None, :], hm[:, None] & (c_off < C)[None, :]


@triton.jit
def _coo_ids(map_ptr, e_pos, e_mask, HAS_MAP: tl.constexpr, I64: tl.constexpr):
    """The COO ids (:func:`_idx`'s width) of the CSC positions ``e_pos``: through the CSC -> COO map, or the positions themselves
    where no edge tensor is read or written (no map)."""
    if HAS_MAP:
        coo = _idx(tl.load(map_ptr + e_pos, mask=e_mask, other=0), I64)
    else:
        coo = e_pos
    return coo


@triton.jit
def _edge_rows(coo, e_mask, hc, hc_mask, edge_ptr, ew_ptr, D, DE: tl.constexpr):
    """GATv2's edge term ``f [BLOCK, HG, BLOCK_C]`` (float32) of the COO edges ``coo [BLOCK]`` for the feature offsets
    ``hc [HG, BLOCK_C]``. ``DE == 0``: rows of projected features ``edge [E, H*C]``. ``DE > 0`` (the fused
    projection): ``f = edge_attr[coo] @ W^T`` from raw features ``edge [E, DE]`` and the weight ``W [H*C, DE]`` (PyG's
    ``lin_edge.weight``) at ``ew_ptr``, an unrolled loop over ``DE``: per step one element a row of ``edge_attr`` and a
    ``[HG, BLOCK_C]`` slice of a column of ``W`` (cached), one multiply-add over the tile. Masked lanes are 0."""
    tile_mask = e_mask[:, None, None] & hc_mask[None, :, :]
    if DE == 0:
        f = tl.load(edge_ptr + coo[:, None, None] * D + hc[None, :, :], mask=tile_mask, other=0.0).to(tl.float32)
    else:
        f = tl.where(tile_mask, 0.0, 0.0)
        for k in tl.static_range(DE):
            col = tl.load(edge_ptr + coo * DE + k, mask=e_mask, other=0.0).to(tl.float32)
            wk = tl.load(ew_ptr + hc * DE + k, mask=hc_mask, other=0.0).to(tl.float32)
            f += col[:, None, None] * wk[None, :, :]
    return f


@triton.jit
def _logits(e_pos, e_mask, src, h_off, hm, hc, hc_mask, xj, xi, aw, sd,
            map_ptr, edge_ptr, ew_ptr, ssrc_ptr, sedge_ptr,
            H, D, alpha,
            V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr, ACT: tl.constexpr,
            I64: tl.constexpr):
    """Logits ``s [BLOCK, HG]`` (float32) of a block of CSC positions ``e_pos [BLOCK]`` with sources ``src`` for the
    heads ``h_off [HG]``, and ``coo``, their COO ids (:func:`_idx`'s width).

    GAT: ``act(score_src[j, h] + sd[h] + score_edge[coo, h])`` with ``sd`` the destination's scores (loaded once per
    program, not per block). GATv2: ``sum_c a[h, c] act(z[h, c])`` with ``z = x_j + x_i + f_coo``;
    ``xj [BLOCK, HG, BLOCK_C]`` is the gathered source tile, ``xi [HG, BLOCK_C]`` the destination's slice,
    ``aw [HG, BLOCK_C]`` the attention vector; ``hc [HG, BLOCK_C]`` the offsets ``h * C + c`` inside a feature row;
    ``f`` from :func:`_edge_rows` (``DE > 0``: projected on the fly)."""
    coo = _coo_ids(map_ptr, e_pos, e_mask, HAS_MAP, I64)
    if V2:
        z = xj + xi[None, :, :]
        if HAS_EDGE:
            z += _edge_rows(coo, e_mask, hc, hc_mask, edge_ptr, ew_ptr, D, DE)
        s = _sum(_act(z, ACT, alpha) * aw[None, :, :], 2)
    else:
        eh_mask = e_mask[:, None] & hm[None, :]
        t = tl.load(ssrc_ptr + src[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0) + sd[None, :]
        if HAS_EDGE:
            t += tl.load(sedge_ptr + coo[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0)
        s = _act(t, ACT, alpha)
    return s, coo


@triton.jit
def _philox4(seed, c0, c1, c2):
    """Philox-4x32-10 (Salmon et al., SC'11), key ``seed`` (int64: its low and high 32 bits), counters ``(c0, c1, c2,
    0)`` (uint32 tensors of one shape): its four uint32 outputs. Written out with builtins because ``tl.randint4x``
    is itself a ``@triton.jit`` function, which Triton's interpreter cannot call where triton was imported before
    ``TRITON_INTERPRET=1`` was set (see :func:`_sum`); :func:`cudnn_gnn._philox.philox4x32` is the same function."""
    key = seed.to(tl.uint64)
    k0 = (key & 0xFFFFFFFF).to(tl.uint32)
    k1 = ((key >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c3 = c0 * 0
    for _ in tl.static_range(10):
        _c0, _c2 = c0, c2
        c0 = tl.umulhi(_c2, 0xCD9E8D57) ^ c1 ^ k0
        c2 = tl.umulhi(_c0, 0xD2511F53) ^ c3 ^ k1
        c1 = tl.mul(_c2, 0xCD9E8D57, sanitize_overflow=False)
        c3 = tl.mul(_c0, 0xD2511F53, sanitize_overflow=False)
        k0 = tl.add(k0, 0x9E3779B9, sanitize_overflow=False)
        k1 = tl.add(k1, 0xBB67AE85, sanitize_overflow=False)
    return c0, c1, c2, c3


@triton.jit
def _draws(seed, e_pos, h_off):
    """The dropout draws ``[BLOCK, HG]`` uint32 of CSC positions ``e_pos [BLOCK]`` and heads ``h_off [HG]``: head
    ``h`` of edge ``e`` takes output ``h % 4`` of Philox for counters ``(e, e >> 32, h // 4)``
    (:mod:`cudnn_gnn._philox`), so one Philox evaluation serves four heads. With ``HG >= 4`` (a group of whole
    fours: ``HG`` is a power of two and groups start at multiples of it) each evaluation's four outputs are
    interleaved into the tile; with fewer heads a program each lane evaluates its own and picks its output."""
    e = e_pos.to(tl.int64)
    lo = (e & 0xFFFFFFFF).to(tl.uint32)
    hi = ((e >> 32) & 0xFFFFFFFF).to(tl.uint32)
    HG: tl.constexpr = h_off.shape[0]
    if HG >= 4:
        quad = _max(tl.reshape(h_off, [HG // 4, 4]), 1) // 4  # each four heads' counter
        c2 = (lo[:, None] * 0 + quad[None, :].to(tl.uint32))
        r0, r1, r2, r3 = _philox4(seed, lo[:, None] + c2 * 0, hi[:, None] + c2 * 0, c2)
        r = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), [e_pos.shape[0], HG])
    else:
        c2 = lo[:, None] * 0 + (h_off // 4)[None, :].to(tl.uint32)
        r0, r1, r2, r3 = _philox4(seed, lo[:, None] + c2 * 0, hi[:, None] + c2 * 0, c2)
        k = (h_off % 4)[None, :]
        r = tl.where(k == 0, r0, tl.where(k == 1, r1, tl.where(k == 2, r2, r3)))
    return r


@triton.jit
def _drop_factor(e_pos, h_off, eh_mask, drop_ptr, drop_thr, H, DROP: tl.constexpr, I64: tl.constexpr):
    """The attention dropout factors ``[BLOCK, HG]`` float32 of the CSC positions ``e_pos [BLOCK]`` and heads
    ``h_off [HG]`` (0 on masked lanes). ``DROP == 1``: read from explicit factors ``[E, H]`` in CSC order (one
    contiguous run of a row's edges). ``DROP == 2``: counter-based, nothing read but the seed ``drop_ptr [1]``
    (int64): kept where the top 31 bits of the edge's and head's draw (:func:`_draws`) reach ``drop_thr``.
    ``DROP == 3``: the same decision read back from the keep flags ``drop_ptr [E, H]`` (uint8, CSC order, 1 = kept)
    that the forward wrote where it drew with ``DROP == 2`` (:func:`_store_keep`): what the backward passes take in
    place of Philox (one byte an edge and head; the source pass' scattered edges read one sector each). With 2 and
    3 the factor of a kept edge is ``1 / (1 - drop_thr / 2**31)``, computed in float64 and rounded once
    (:mod:`cudnn_gnn._philox` is the same function in torch, bit for bit), so both give the same bits."""
    if DROP == 1:
        f = tl.load(drop_ptr + _idx(e_pos, I64)[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0)
    else:
        thr = tl.full([1], drop_thr, tl.int64)  # a runtime int64 whatever Triton specialised the argument to
        if DROP == 3:
            keep = tl.load(drop_ptr + _idx(e_pos, I64)[:, None] * H + h_off[None, :], mask=eh_mask, other=0) != 0
        else:
            seed = tl.load(drop_ptr)
            keep = (_draws(seed, e_pos, h_off) >> 1).to(tl.int64) >= thr
        # 1 - thr / 2**31 is exact, >= 2**-31 below thr = 2**31 (the maximum only keeps p = 1 from dividing by 0)
        scale = 1.0 / tl.maximum(1.0 - thr.to(tl.float64) * 4.656612873077393e-10, 4.656612873077393e-10)
        scale = tl.where(thr >= 2147483648, 0.0, scale)
        f = tl.where(eh_mask & keep, scale.to(tl.float32), 0.0)
    return f


@triton.jit
def _store_keep(keep_ptr, e_pos, h_off, eh_mask, f, H, I64: tl.constexpr):
    """Write the keep flags of the dropout factors ``f [BLOCK, HG]`` (:func:`_drop_factor`'s) of the CSC positions
    ``e_pos [BLOCK]`` and heads ``h_off [HG]`` to ``keep_ptr [E, H]`` (uint8, CSC order): 1 where ``f != 0``. That is
    the draw's decision exactly (a kept edge's factor is 0 only at ``p = 1``, where no edge is kept), and
    :func:`_drop_factor` with ``DROP == 3`` turns a flag back into the same factor. A program of a row walk writes its
    head group's bytes of its own edges (one contiguous run a block where the group holds every head): no two
    programs write one byte."""
    tl.store(keep_ptr + _idx(e_pos, I64)[:, None] * H + h_off[None, :], (f != 0).to(tl.uint8), mask=eh_mask)


@triton.jit
def _item(work_ptr, WHOLE: tl.constexpr, I64: tl.constexpr):
    """A work item ``(row, start, end, slot)`` (:func:`_idx`'s width): the row's CSC positions ``start .. end`` and where its
    results go, ``slot == -1``: the row itself (the whole row), ``slot >= 0``: partial slot ``slot`` (one chunk of a
    hub row, merged later), ``slot == -2``: nothing (padding of the fixed-size work list). ``WHOLE``: the work list
    is the offsets ``[N+1]`` themselves (see :func:`n_items`): program ``i`` takes row ``i`` whole."""
    pid = _idx(tl.program_id(0), I64)
    if WHOLE:
        row, start, end, slot = pid, _idx(tl.load(work_ptr + pid), I64), _idx(tl.load(work_ptr + pid + 1), I64), \
            pid * 0 - 1
    else:
        item = work_ptr + pid * 4
        row, start, end, slot = _idx(tl.load(item), I64), _idx(tl.load(item + 1), I64), \
            _idx(tl.load(item + 2), I64), _idx(tl.load(item + 3), I64)
    return row, start, end, slot


@triton.jit
def _normalise_att(start, end, lse, h_off, hm, map_ptr, drop_ptr, drop_thr, att_ptr, H,
                   HAS_MAP: tl.constexpr, DROP: tl.constexpr, BLOCK: tl.constexpr, I64: tl.constexpr):
    """Turn the raw logits stored in ``att`` for the CSC positions ``start .. end`` into ``exp(s - lse) * mask``."""
    for e0 in range(start, end, BLOCK):
        e_pos = e0 + tl.arange(0, BLOCK)
        e_mask = e_pos < end
        eh_mask = e_mask[:, None] & hm[None, :]
        coo = _coo_ids(map_ptr, e_pos, e_mask, HAS_MAP, I64)
        att_off = coo[:, None] * H + h_off[None, :]
        s = tl.load(att_ptr + att_off, mask=eh_mask, other=0.0)
        tl.debug_barrier()  # the slots read above are overwritten below, possibly by other threads
        a = tl.exp(s - lse[None, :])
        if DROP != 0:
            a = a * _drop_factor(e_pos, h_off, eh_mask, drop_ptr, drop_thr, H, DROP, I64)
        tl.store(att_ptr + att_off, a, mask=eh_mask)


@cached_launch
@triton.jit
def _merge_sum_kernel(hubs_ptr, part_ptr, out_ptr, W, BLOCK_W: tl.constexpr, I64: tl.constexpr):
    """``out[row, :W] = sum_k part[slot0 + k, :W]`` for the hub ``hubs[pid0] = (row, slot0, n)``, in slot order
    (float32 sums, stored in ``out``'s dtype); padding entries (``n == 0``) write nothing."""
    hub = hubs_ptr + _idx(tl.program_id(0), I64) * 3
    row = _idx(tl.load(hub), I64)
    slot0 = _idx(tl.load(hub + 1), I64)
    n = _idx(tl.load(hub + 2), I64)
    cols = _idx(tl.program_id(1), I64) * BLOCK_W + tl.arange(0, BLOCK_W)
    cm = cols < W
    acc = tl.full([BLOCK_W], 0.0, tl.float32)
    for k in range(0, n):
        acc += tl.load(part_ptr + (slot0 + k) * W + cols, mask=cm, other=0.0)
    tl.store(out_ptr + row * W + cols, acc, mask=cm & ((cols * 0 + n) > 0))


def _or(t: Tensor | None, fallback: Tensor) -> Tensor:
    """Triton needs a pointer for every argument; unused optional inputs get a harmless stand-in."""
    return fallback if t is None else t


EDGE_INPUT_PARAMS = ("x_src_ptr", "x_dst_ptr", "edge_ptr", "ew_ptr", "attw_ptr", "ssrc_ptr", "sdst_ptr", "sedge_ptr")
"""The row kernels' input parameters, in their order (one run in each signature; the source pass takes the first five):
``x_src_ptr`` and then what :func:`edge_inputs` gives (``tests/ops/test_triton_backend.py`` holds the signatures to
it)."""

DROPOUT_PARAMS = ("drop_ptr", "drop_thr")
"""The kernels' dropout parameters, in their order (what :func:`drop_args` gives)."""


def edge_inputs(call: GatCall | Gatv2Call, scores: tuple[Tensor, Tensor] | None, fallback: Tensor
                ) -> tuple[tuple[Tensor, ...], Tensor | None, Tensor | None, bool]:
    """What the row kernels take after ``x_src_ptr``, ``(x_dst, edge, edge_weight, attw, score_src, score_dst,
    score_edge)`` pointers, for ``call`` (GAT's with its node ``scores``, or None where the kernel reads none, the
    source pass; GATv2's, whose scores are ``fallback`` stand-ins), with GATv2's ``(edge_attr, lin_edge_weight)``
    (Nones for GAT: the kernels' ``DE`` is :func:`_fused_dim` of them) and whether an edge term is read
    (``HAS_EDGE``). The source pass takes the first four."""
    x_src = call.x_src
    if isinstance(call, Gatv2Call):
        edge, weight = call.edge_attr, call.lin_edge_weight
        return ((call.x_dst, _or(edge, x_src), _or(weight, x_src), call.attn_weights, fallback, fallback, fallback),
                edge, weight, edge is not None)
    if scores is None:
        scores = (fallback, fallback)
    return (x_src, x_src, x_src, x_src, *scores, _or(call.score_edge, fallback)), None, None, call.score_edge is not None


def drop_args(drop: KernelDropout | None, fallback: Tensor) -> tuple[Tensor, int]:
    """The kernels' ``(drop_ptr, drop_thr)`` for ``drop`` (with ``fallback`` as the pointer where there is no
    dropout)."""
    if drop is None:
        return fallback, 0
    return drop.tensor, drop.threshold


def drop_mode(drop: KernelDropout | None) -> int:
    """The kernels' ``DROP``: 0 none, 1 explicit factors (float32, CSC order), 2 counter-based (an int64 seed), 3 the
    keep flags of counter-based dropout (uint8 ``[E, H]``, CSC order) its forward wrote for the backward."""
    if drop is None:
        return 0
    return {torch.int64: 2, torch.uint8: 3}.get(drop.tensor.dtype, 1)


def _fused_dim(edge: Tensor | None, edge_weight: Tensor | None) -> int:
    """The kernels' ``DE``: the raw edge width where GATv2's edge projection is fused (``edge_weight`` given), else
    0 (projected rows, or no edge features)."""
    return 0 if edge is None or edge_weight is None else edge.shape[1]


def _partial(rows: int, width: int, like: Tensor) -> Tensor:
    """A float32 ``[rows, width]`` partial buffer; with no rows, ``like`` (a float32 tensor of the call) stands in
    as the pointer and nothing is allocated: a work list without chunk items has no program that touches a partial
    (every access is masked by ``slot >= 0``, and the merges launch only for hub rows). A small graph's step is host
    time, of which every allocation is a part."""
    if rows == 0:
        return like
    return torch.empty(rows, width, device=like.device, dtype=torch.float32)


def _merge_sum(hubs: Tensor, part: Tensor, out: Tensor, width: int, i64: bool) -> None:
    """``out[row] = sum of the row's partial slots`` for every hub row, in slot order (see :func:`_merge_sum_kernel`;
    ``i64``: the call's offset width, its ``I64``)."""
    if hubs.shape[0] == 0:
        return
    block_w = min(1024, tuning.next_pow2(max(width, 1)))
    _merge_sum_kernel[(hubs.shape[0], tuning.cdiv(width, block_w))](hubs, part, out, width, BLOCK_W=block_w, I64=i64,
                                                                    num_warps=4)


def n_items(work: Tensor) -> int:
    """The programs of a work list: ``work [P, 4]`` (items of :func:`cudnn_gnn.backends.triton.worklists.work_list`), or
    offsets ``[N+1]`` themselves for every row whole in row order (``N``; the kernels' ``WHOLE``)."""
    return work.shape[0] - 1 if work.dim() == 1 else work.shape[0]
