"""A stand-in for the cuDNN frontend's graph API (``cudnn.pygraph`` with ``sdpa`` / ``sdpa_backward``) on CPU.

It checks what our SDPA graphs declare against the contract read from the frontend (ragged offsets on q, k, v, o and
the statistics, int64 columns ``[B+1, 1, 1, 1]``; lengths int32 ``[B, 1, 1, 1]``; packed ``[T, H, 1]`` statistics in
the forward, padded ``[B, H, S, 1]`` in the backward; dropout as ``(p, seed, offset)`` with ``[1, 1, 1, 1]`` int64
tensors), runs the graphs in float64 torch from the bound buffers (element offsets divided back into tokens, lengths
from the length columns), and serializes a built graph as its declaration. Dropout draws its mask from the seed and
offset buffers (a CPU generator), one mask per (graph, head, query, key), so a forward and a backward that get the
same seed see the same mask. Counts builds, deserializations and executions.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import torch

MAGIC = b"FAKE-CUDNN-PLAN:"


class NotSupported(RuntimeError):
    """What the fake raises from ``check_support`` for a configuration the test marks unsupported."""


class FakeTensor:
    def __init__(self, name: str, dim: list[int] | None = None, stride: list[int] | None = None,
                 data_type: Any = None, uid: int | None = None) -> None:
        self.name, self.dim, self.stride, self.data_type, self.uid = name, dim, stride, data_type, uid
        self.ragged: FakeTensor | None = None
        self.output = False

    def set_ragged_offset(self, t: FakeTensor) -> FakeTensor:
        self.ragged = t
        return self

    def set_uid(self, uid: int) -> FakeTensor:
        self.uid = int(uid)
        return self

    def set_output(self, flag: bool) -> FakeTensor:
        self.output = flag
        return self

    def set_dim(self, dim: list[int]) -> FakeTensor:
        self.dim = list(dim)
        return self

    def set_stride(self, stride: list[int]) -> FakeTensor:
        self.stride = list(stride)
        return self

    def set_data_type(self, dt: Any) -> FakeTensor:
        self.data_type = dt
        return self

    def spec(self) -> dict[str, Any]:
        return {"uid": self.uid, "dim": self.dim, "stride": self.stride, "dtype": self.data_type,
                "ragged": None if self.ragged is None else self.ragged.uid}


def _column(t: FakeTensor, rows: int, dtype: str) -> None:
    assert t.dim == [rows, 1, 1, 1] and t.stride == [1, 1, 1, 1] and t.data_type == dtype, t.spec()


class FakeGraph:
    def __init__(self, fe: FakeFrontend, handle: Any = None, io_data_type: Any = None,
                 intermediate_data_type: Any = None, compute_data_type: Any = None) -> None:
        self.fe = fe
        self.handle = handle
        self.io = io_data_type
        if io_data_type is not None:
            assert intermediate_data_type == compute_data_type == "FLOAT"
        self.config: dict[str, Any] | None = None
        self.built = False

    # ------------------------------------------------------------------ declaration
    def tensor(self, name: str, dim: list[int], stride: list[int], data_type: Any, uid: int) -> FakeTensor:
        return FakeTensor(name, list(dim), list(stride), data_type, int(uid))

    def _check_io(self, b: int, h: int, s: int, *ts: FakeTensor) -> None:
        for t in ts:
            assert t.data_type == self.io and t.dim[:3] == [b, h, s], t.spec()
            d = t.dim[3]
            assert t.stride == [s * h * d, d, h * d, 1], t.spec()  # packed [T, H, D] declared as [B, H, S, D]
            assert t.ragged is not None, f"{t.name} has no ragged offset"
            _column(t.ragged, b + 1, "INT64")

    def _common(self, q: FakeTensor, k: FakeTensor, v: FakeTensor, kw: dict[str, Any]) -> dict[str, Any]:
        b, h, s, d = q.dim
        self._check_io(b, h, s, q, k, v)
        assert kw.pop("use_padding_mask") is True and kw.pop("diagonal_alignment") == "TOP_LEFT"
        _column(kw["seq_len_q"], b, "INT32")
        _column(kw["seq_len_kv"], b, "INT32")
        drop = kw.pop("dropout", None)
        cfg: dict[str, Any] = {"b": b, "h": h, "s": s, "d": d, "dv": v.dim[3], "scale": kw.pop("attn_scale"),
                               "q": q.spec(), "k": k.spec(), "v": v.spec(), "seq_q": kw.pop("seq_len_q").uid,
                               "seq_kv": kw.pop("seq_len_kv").uid, "dropout": None}
        if drop is not None:
            p, seed, offset = drop
            assert isinstance(p, float) and 0 < p < 1
            _column(seed, 1, "INT64")
            _column(offset, 1, "INT64")
            cfg["dropout"] = [p, seed.uid, offset.uid]
        return cfg

    def sdpa(self, name: str, q: FakeTensor, k: FakeTensor, v: FakeTensor, generate_stats: bool,
             **kw: Any) -> list[FakeTensor]:
        cfg = self._common(q, k, v, kw)
        assert generate_stats is True and not kw, kw
        self._out, self._stats = FakeTensor("o"), FakeTensor("stats")
        cfg["dir"] = "fwd"
        self.config = cfg
        return [self._out, self._stats]

    def sdpa_backward(self, name: str, q: FakeTensor, k: FakeTensor, v: FakeTensor, o: FakeTensor,
                      dO: FakeTensor, stats: FakeTensor, **kw: Any) -> list[FakeTensor]:  # noqa: N803
        cfg = self._common(q, k, v, kw)
        b, h, s = cfg["b"], cfg["h"], cfg["s"]
        self._check_io(b, h, s, o, dO)
        assert dO.ragged is o.ragged
        assert stats.dim == [b, h, s, 1] and stats.stride == [h * s, s, 1, 1] and stats.data_type == "FLOAT"
        assert stats.ragged is None  # padded statistics in the backward
        total = kw.pop("max_total_seq_len_q")
        assert total == kw.pop("max_total_seq_len_kv") and total % 64 == 0
        cfg.update(dir="bwd", o=o.spec(), do=dO.spec(), stats=stats.spec(), total=total,
                   deterministic=kw.pop("use_deterministic_algorithm"))
        assert not kw, kw
        self._grads = [FakeTensor("dq"), FakeTensor("dk"), FakeTensor("dv")]
        self.config = cfg
        return list(self._grads)

    def validate(self) -> None:
        assert self.config is not None

    def build_operation_graph(self) -> None:
        cfg = self.config
        assert cfg is not None
        if cfg["dir"] == "fwd":
            self._check_io(cfg["b"], cfg["h"], cfg["s"], self._out)
            st = self._stats
            assert st.dim == [cfg["b"], cfg["h"], cfg["s"], 1] and st.data_type == "FLOAT" and st.output
            assert st.stride == [cfg["s"] * cfg["h"], 1, cfg["h"], 1]  # packed [T, H, 1]
            assert st.ragged is not None
            _column(st.ragged, cfg["b"] + 1, "INT64")
            cfg.update(o=self._out.spec(), stats=st.spec())
        else:
            self._check_io(cfg["b"], cfg["h"], cfg["s"], *self._grads)
            cfg.update(grad_q=self._grads[0].spec(), grad_k=self._grads[1].spec(), grad_v=self._grads[2].spec())

    def create_execution_plans(self, modes: list[Any]) -> None:
        assert modes == ["A", "FALLBACK"]

    def check_support(self) -> None:
        if self.fe.unsupported is not None and self.fe.unsupported(self.config):
            raise NotSupported("No valid engine configs for SDPA_NODE\nmore detail")

    def build_plans(self) -> None:
        self.built = True
        self.fe.builds += 1
        self.fe.built_keys.append(json.dumps(self.config, sort_keys=True))

    def get_workspace_size(self) -> int:
        return 256

    def serialize(self, as_bytes: bool = False) -> bytes:
        assert self.built and as_bytes
        if self.fe.serialize_error is not None:
            raise self.fe.serialize_error
        return MAGIC + json.dumps(self.config, sort_keys=True).encode()

    def deserialize(self, handle: Any, blob: bytes) -> None:
        assert handle is self.handle is not None
        if not blob.startswith(MAGIC):
            raise RuntimeError("CUDNN_STATUS_BAD_PARAM: not an execution plan")
        self.config = json.loads(blob[len(MAGIC):])
        self.built = True
        self.fe.loads += 1

    # ------------------------------------------------------------------ execution
    def execute(self, pack: dict[int, torch.Tensor], workspace: torch.Tensor, handle: Any = None) -> None:
        cfg = self.config
        assert self.built and cfg is not None and handle is not None
        assert workspace.dtype == torch.uint8 and workspace.numel() >= 256
        self.fe.executes += 1
        for t in pack.values():
            assert t.data_ptr() % 16 == 0, "unaligned base"
        b, h, s, d, dv = cfg["b"], cfg["h"], cfg["s"], cfg["d"], cfg["dv"]
        lengths = pack[cfg["seq_q"]].reshape(-1)
        assert lengths.dtype == torch.int32 and lengths.shape == (b,) and torch.equal(lengths, pack[cfg["seq_kv"]].reshape(-1))

        def starts(spec: dict[str, Any], width: int) -> torch.Tensor:
            off = pack[spec["ragged"]]
            assert off.dtype == torch.int64 and off.shape == (b + 1, 1, 1, 1)
            off = off.reshape(-1)
            assert torch.equal(off % width, torch.zeros_like(off)), "offsets are in elements of [T, H, D] rows"
            return off // width

        cu = starts(cfg["q"], h * d)
        for name, width in (("k", h * d), ("v", h * dv), ("o", h * dv)):
            assert torch.equal(starts(cfg[name], width), cu), name
        assert torch.equal(cu[1:] - cu[:-1], lengths.long())
        assert int(lengths.max()) <= s
        q, k, v = (pack[cfg[n]["uid"]] for n in ("q", "k", "v"))
        t = q.shape[0]
        assert q.shape == (t, h, d) and q.is_contiguous() and int(cu[-1]) == t
        seed = offset = None
        if cfg["dropout"] is not None:
            p, su, ou = cfg["dropout"]
            seed, offset = pack[su], pack[ou]
            assert seed.shape == offset.shape == (1, 1, 1, 1) and seed.dtype == offset.dtype == torch.int64
            assert seed.device == q.device  # device tensors, as MHA.cpp binds them
            self.fe.seeds.append(int(seed))
        masks = _masks(cfg, lengths.tolist(), seed, offset)
        if cfg["dir"] == "fwd":
            out, lse, _ = _attention(q, k, v, cu, cfg["scale"], masks)
            pack[cfg["o"]["uid"]].copy_(out)
            st = pack[cfg["stats"]["uid"]]
            assert st.shape == (t, h, 1) and st.dtype == torch.float32
            assert torch.equal(starts(cfg["stats"], h), cu)
            st.copy_(lse.unsqueeze(-1))
            return
        assert t <= cfg["total"], "more tokens than the backward plan's max_total_seq_len"
        o, do, stats = (pack[cfg[n]["uid"]] for n in ("o", "do", "stats"))
        assert stats.shape == (b, h, s, 1) and stats.dtype == torch.float32
        assert torch.equal(starts(cfg["do"], h * dv), cu)
        out, lse, grads = _attention(q, k, v, cu, cfg["scale"], masks, do)
        want = torch.zeros(b, h, s, dtype=torch.float64)
        for i in range(b):
            n = int(lengths[i])
            want[i, :, :n] = lse[int(cu[i]):int(cu[i]) + n].T
        torch.testing.assert_close(stats[..., 0].double(), want, rtol=1e-5, atol=1e-5)  # padded as cuDNN reads it
        torch.testing.assert_close(o.double(), out, rtol=2e-2, atol=2e-2)
        for spec, g in zip((cfg["grad_q"], cfg["grad_k"], cfg["grad_v"]), grads):
            assert torch.equal(starts(spec, g.shape[1] * g.shape[2]), cu)
            pack[spec["uid"]].copy_(g)


def _masks(cfg: dict[str, Any], lengths: list[int], seed: torch.Tensor | None,
           offset: torch.Tensor | None) -> list[torch.Tensor | None]:
    if seed is None or offset is None:
        return [None] * len(lengths)
    p = cfg["dropout"][0]
    g = torch.Generator().manual_seed((int(seed) * 1_000_003 + int(offset)) % 2**63)
    return [(torch.rand(cfg["h"], n, n, generator=g, dtype=torch.float64) >= p).double() / (1 - p) for n in lengths]


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, scale: float,
               masks: list[torch.Tensor | None], grad: torch.Tensor | None = None) -> tuple[Any, ...]:
    """Per-graph softmax attention in float64: output ``[T, H, Dv]``, log-sum-exp ``[T, H]`` and, given ``grad``
    (dO), the gradients of q, k, v (written out by hand: the fake runs inside a custom op, below autograd)."""
    t, h, dv = q.shape[0], q.shape[1], v.shape[2]
    out = torch.zeros(t, h, dv, dtype=torch.float64)
    lse_all = torch.zeros(t, h, dtype=torch.float64)
    dq, dk, dvv = (torch.zeros(x.shape, dtype=torch.float64) for x in (q, k, v))
    for i, mask in enumerate(masks):
        a, z = int(cu[i]), int(cu[i + 1])
        qs, ks, vs = (x[a:z].double().transpose(0, 1) for x in (q, k, v))  # [H, n, D]
        scores = qs @ ks.transpose(-1, -2) * scale
        lse = torch.logsumexp(scores, -1)  # [H, n]
        p = torch.exp(scores - lse[..., None])
        m = torch.ones_like(p) if mask is None else mask
        attn = p * m
        out[a:z] = (attn @ vs).transpose(0, 1)
        lse_all[a:z] = lse.T
        if grad is not None:
            go = grad[a:z].double().transpose(0, 1)
            dvv[a:z] = (attn.transpose(-1, -2) @ go).transpose(0, 1)
            dp = (go @ vs.transpose(-1, -2)) * m
            ds = p * (dp - (dp * p).sum(-1, keepdim=True))
            dq[a:z] = (scale * ds @ ks).transpose(0, 1)
            dk[a:z] = (scale * ds.transpose(-1, -2) @ qs).transpose(0, 1)
    return out, lse_all, (dq, dk, dvv)


class FakeFrontend:
    """The ``cudnn`` module as our adapter uses it."""

    __version__ = "1.32.0"
    data_type = SimpleNamespace(HALF="HALF", BFLOAT16="BFLOAT16", FLOAT="FLOAT", INT32="INT32", INT64="INT64")
    heur_mode = SimpleNamespace(A="A", FALLBACK="FALLBACK")
    diagonal_alignment = SimpleNamespace(TOP_LEFT="TOP_LEFT")

    def __init__(self, version: int = 92801) -> None:
        self.version = version
        self.builds = self.loads = self.executes = 0
        self.built_keys: list[str] = []
        self.seeds: list[int] = []
        self.unsupported: Any = None  # a predicate on a graph's config: check_support raises where it is true
        self.serialize_error: Exception | None = None

    def backend_version(self) -> int:
        return self.version

    def create_handle(self) -> object:
        return object()

    def set_stream(self, handle: Any, stream: Any) -> None:
        raise AssertionError("no streams on CPU")

    def pygraph(self, **kw: Any) -> FakeGraph:
        return FakeGraph(self, **kw)
