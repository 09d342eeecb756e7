"""Counter-based attention dropout: the keep/drop decision of every (CSC edge position, head) from a seed, the same
bits on every backend.

The Triton kernels draw it in-kernel with Philox-4x32, 10 rounds (Salmon et al., "Parallel random numbers: as easy
as 1, 2, 3", SC'11), in the forward, so no float ``[E, H]`` mask is ever materialised; where a backward follows,
the forward also writes the keep decisions it drew (``uint8 [E, H]``, one byte an edge and head), which the backward
reads instead of drawing again (a byte read in place of Philox's integer work); :func:`draws` is the same function
in plain torch integer arithmetic, for the backends that take a materialised mask (reference, cuDNN) and for tests.
An edge is kept where the top 31 bits of its draw are at least :func:`keep_threshold` ``(p)``: an integer
comparison, so the decision is exact on every device (no float conversion of the draw), and the drop rate is ``p``
to within ``2**-31``; a kept edge's factor is :func:`keep_scale` of that threshold, the same float32 on every device.

Counters: the edge's CSC position ``e`` as a 64-bit integer split into Philox's ``(c0, c1)`` (low and high 32 bits),
``c2 = h // 4``, ``c3 = 0``; head ``h`` takes output ``h % 4``, so one evaluation serves four heads (the
generator's four outputs are independent streams; FlashAttention's dropout and ``tl.randint4x`` use them the same
way). The key is the seed's low and high 32 bits. With one head this is ``tl.randint(seed, e)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["SEED_BOUND", "draw_seed", "draws", "keep_scale", "keep_threshold", "philox4x32"]

_M32 = 0xFFFFFFFF
_ROUND_A, _ROUND_B = 0xD2511F53, 0xCD9E8D57  # Philox-4x32's multipliers
_KEY_A, _KEY_B = 0x9E3779B9, 0xBB67AE85  # and its key increments (Weyl sequence)
_ONE = 2**31  # draws are compared in 31 bits
SEED_BOUND = 2**62
"""Seeds are integers in ``[0, SEED_BOUND)`` (a drawn one too): positive as int64 on every path."""


def _mul32(a: int, b: Tensor) -> tuple[Tensor, Tensor]:
    """``(hi, lo)`` 32-bit halves of ``a * b`` for a 32-bit constant ``a`` and int64 ``b`` holding values below
    2**32, without overflowing int64: ``b`` split into 16-bit halves."""
    b_lo, b_hi = b & 0xFFFF, b >> 16
    p_lo, p_hi = a * b_lo, a * b_hi  # each < 2**48
    hi = (p_hi + (p_lo >> 16)) >> 16
    lo = (((p_hi & 0xFFFF) << 16) + p_lo) & _M32
    return hi, lo


def philox4x32(seed: int | Tensor, c0: Tensor, c1: Tensor, c2: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The four 32-bit outputs of Philox-4x32-10 for key ``seed`` and counters ``(c0, c1, c2, 0)`` (int64 tensors
    of one shape holding values below ``2**32``), as int64 values in ``[0, 2**32)``. ``seed``: an int in ``[0,
    2**63)`` or an int64 tensor ``[1]`` on the counters' device (read there: no sync)."""
    if isinstance(seed, Tensor):
        seed = seed.reshape(()).to(torch.int64)
    c3 = torch.zeros_like(c0)
    k0, k1 = seed & _M32, (seed >> 32) & _M32
    for _ in range(10):
        hi_b, lo_b = _mul32(_ROUND_B, c2)
        hi_a, lo_a = _mul32(_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + _KEY_A) & _M32, (k1 + _KEY_B) & _M32
    return c0, c1, c2, c3


def draws(seed: int | Tensor, num_edges: int, heads: int, device: torch.device | None = None) -> Tensor:
    """The dropout draws ``[E, H]`` (int64 values in ``[0, 2**32)``) of every CSC edge position and head, as the
    Triton kernels evaluate them: head ``h`` of edge ``e``, output ``h % 4`` of :func:`philox4x32` for counters
    ``(e, e >> 32, h // 4)``."""
    quads = -(-heads // 4)
    e = torch.arange(num_edges, device=device, dtype=torch.int64).view(-1, 1).expand(num_edges, quads)
    q = torch.arange(quads, device=device, dtype=torch.int64).view(1, -1).expand(num_edges, quads)
    out = torch.stack(philox4x32(seed, e & _M32, (e >> 32) & _M32, q.contiguous()), -1)  # [E, quads, 4]
    return out.reshape(num_edges, 4 * quads)[:, :heads]


def keep_threshold(p: float) -> int:
    """The keep threshold of dropout probability ``p``: an edge is kept where ``draw >> 1 >= keep_threshold(p)``,
    ``round(p * 2**31)`` in ``[0, 2**31]`` (``2**31``, for ``p = 1``, keeps nothing)."""
    return round(p * _ONE)


def keep_scale(threshold: int) -> float:
    """The factor of a kept edge, ``1 / (1 - threshold / 2**31)`` (so ``1 / (1 - p)`` to within ``2**-31``), 0 for
    ``threshold = 2**31`` (nothing kept). A function of the threshold alone, evaluated in float64 (exact operands:
    ``threshold / 2**31`` and ``1 - `` it are exact in float64; the division is correctly rounded) and rounded to
    float32 once, here and in the kernels alike: the factors are bitwise the same on every backend."""
    return 0.0 if threshold >= _ONE else 1.0 / (1.0 - threshold / _ONE)


def draw_seed(device: torch.device, generator: torch.Generator | None = None) -> Tensor:
    """A fresh seed, an int64 tensor ``[1]`` on ``device`` drawn from torch's generator (or ``generator``): on CUDA
    one small kernel, no host sync, and inside a CUDA graph each replay draws a new one (the generator's graph-safe
    Philox offset advances per replay, as for every random op torch captures)."""
    return torch.randint(0, SEED_BOUND, (1,), device=device, dtype=torch.int64, generator=generator)
