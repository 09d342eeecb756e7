"""Data-parallel and neighbour-sampled training on ``torch.distributed``, the way PyG's multi-GPU examples do it.

One entry point for 1..N processes on one host and for several hosts:

- :func:`launch` runs ``worker(ctx, *args)`` once per rank. Under ``torchrun`` (``RANK``/``WORLD_SIZE``/
  ``LOCAL_RANK`` set) it runs the calling process as its rank; otherwise ``nprocs > 1`` spawns that many
  processes with :func:`torch.multiprocessing.spawn` (``MASTER_ADDR=127.0.0.1``, a free port), and
  ``nprocs == 1`` runs in-process with no process group at all.
- :func:`init_distributed` joins the process group: NCCL for CUDA, gloo for CPU. For NCCL it sets
  ``NCCL_NVLS_ENABLE=0`` (NVLink multicast off) unless the user set it.
- :func:`shard_seeds`: the training seeds a rank gets from ``DistributedSampler(drop_last=True)``: one permutation
  per epoch shared by all ranks, the ``len % world_size`` trailing ones dropped (different ones each epoch), every
  ``world_size``-th from ``rank`` on, so every rank runs the same number of equal batches (DDP needs matched
  collectives) and the union over ranks is the single-process permutation, less the dropped ones.
- :func:`wrap_ddp`: ``DistributedDataParallel(find_unused_parameters=False)``; gradients are averaged over ranks,
  so with equal local batches the update equals a single process's on the global batch (mean loss).
- :func:`all_reduce_counts`: sharded evaluation, correct/total counts summed over ranks.
- :class:`Prefetcher`, :class:`BusyMeter`: the next batch's host->device copy issued on a side CUDA stream
  while the current step runs, and CUDA events around compute for the GPU-busy fraction; both are plain
  pass-throughs on a CPU (the busy fraction is ``None`` there).
- :class:`BackgroundLoader`: a loader that makes its batches on the GPU (the device sampler) run in a thread on a
  side stream, the next batch made while the current step runs; :func:`busy_union_seconds` counts the GPU time of
  both streams' timed work once where it overlaps; :class:`KernelBusyWindow` measures the busy fraction from the
  kernels themselves (``torch.profiler``) over a window of batches.
- :func:`mapped_neighbor_loader`: PyG's ``NeighborLoader`` over a CSC that already lives in (memory-mapped)
  host memory, so ranks and loader workers share one copy of the structure and the features.
- :func:`estimate_memory`: host and GPU bytes of a sampled run (the model of ``docs/scale.md``), with PyG's
  host sampler or the device-resident one (:class:`cudnn_gnn.apps.sampler.DeviceNeighborLoader`).

Our layers need nothing special under DDP: every parameter of ``GATConv`` takes part in every forward (so
``find_unused_parameters=False`` works), and graph caches are per process (each rank converts its own batches).
"""

from __future__ import annotations

import math
import numbers
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

__all__ = [
    "BackgroundLoader",
    "BusyMeter",
    "DistContext",
    "KernelBusyWindow",
    "MemoryEstimate",
    "Prefetcher",
    "all_reduce_counts",
    "busy_union_seconds",
    "estimate_memory",
    "sampler_reports_hops",
    "free_port",
    "init_distributed",
    "launch",
    "launched_by_torchrun",
    "mapped_neighbor_loader",
    "sampled_hop_sizes",
    "shard_seeds",
    "wrap_ddp",
]


# ---------------------------------------------------------------------------------------------- process group


@dataclass(frozen=True)
class DistContext:
    """Where this process stands: its rank, the world size, its local rank on the host and its device.

    ``backend`` is ``"nccl"`` or ``"gloo"`` when a process group was joined, ``None`` for a single process.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def launched_by_torchrun() -> bool:
    """Whether ``torchrun`` (or another launcher using its variables) started this process."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (for ``MASTER_PORT`` of a single-host spawn)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _device_for(device: str, local_rank: int) -> torch.device:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", local_rank)
    return dev


def init_distributed(device: str = "auto", *, rank: int | None = None, world_size: int | None = None,
                     local_rank: int | None = None) -> DistContext:
    """Join the process group described by the arguments or by ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``.

    With a world size of 1 no process group is created (a plain single-process run). Otherwise NCCL is used for
    CUDA devices (each rank on ``cuda:<local_rank>``) and gloo for CPU; ``MASTER_ADDR``/``MASTER_PORT`` come from
    the environment (``torchrun`` and :func:`launch` set them).

    Raises:
        ValueError: ``rank`` is not in ``[0, world_size)``.
    """
    rank = int(os.environ.get("RANK", 0)) if rank is None else rank
    world_size = int(os.environ.get("WORLD_SIZE", 1)) if world_size is None else world_size
    local_rank = int(os.environ.get("LOCAL_RANK", rank)) if local_rank is None else local_rank
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
    dev = _device_for(device, local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world_size == 1:
        return DistContext(0, 1, 0, dev, None)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if backend == "nccl":
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off unless the user chose otherwise
    if not dist.is_initialized():
        kwargs: dict[str, Any] = {"device_id": dev} if dev.type == "cuda" else {}
        dist.init_process_group(backend, rank=rank, world_size=world_size, **kwargs)
    return DistContext(rank, world_size, local_rank, dev, backend)


def cleanup() -> None:
    """Leave the process group (no-op when none was joined)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def _spawned(local_rank: int, world_size: int, device: str, worker: Callable[..., Any], args: tuple) -> None:
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size))
    ctx = init_distributed(device)
    try:
        worker(ctx, *args)
    finally:
        cleanup()


def launch(worker: Callable[..., Any], *, nprocs: int = 1, args: tuple = (), device: str = "auto") -> Any:
    """Run ``worker(ctx, *args)`` on every rank: under ``torchrun`` as this process's rank, else in ``nprocs``
    processes spawned here (one per GPU), else (``nprocs == 1``) in this process without a process group.

    Returns what ``worker`` returns in this process (``None`` after a spawn: spawned ranks return nothing; have
    rank 0 write its results to a file).

    Raises:
        ValueError: ``nprocs < 1``.
    """
    if nprocs < 1:
        raise ValueError(f"nprocs must be >= 1, got {nprocs}")
    if launched_by_torchrun() or nprocs == 1:
        ctx = init_distributed(device)
        try:
            return worker(ctx, *args)
        finally:
            cleanup()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    if _device_for(device, 0).type == "cuda":
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # inherited by the spawned ranks
    torch.multiprocessing.spawn(_spawned, args=(nprocs, device, worker, args), nprocs=nprocs, join=True)
    return None


# ---------------------------------------------------------------------------------------------- data parallel


def shard_seeds(seeds: Tensor, *, epoch: int, seed: int, rank: int, world_size: int, shuffle: bool = True) -> Tensor:
    """This rank's training seeds for ``epoch``, as ``torch.utils.data.DistributedSampler(drop_last=True)`` deals
    them (it is what runs): one permutation of ``seed + epoch`` shared by all ranks, the ``len % world_size`` last
    entries dropped, then every ``world_size``-th entry from ``rank`` on.

    Shapes: ``seeds`` ``[n]`` -> ``[n // world_size]``.
    """
    from torch.utils.data import DistributedSampler

    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
    # a list of n Python ints: 0.1 s for papers100M's 1.2M training seeds, paid once a run
    dataset: Any = range(seeds.numel())  # the sampler reads len() only
    sampler: DistributedSampler[int] = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                                 drop_last=True)
    sampler.set_epoch(epoch)
    return seeds[torch.tensor(list(sampler), dtype=torch.long, device=seeds.device)]


def wrap_ddp(model: nn.Module, ctx: DistContext) -> nn.Module:
    """``DistributedDataParallel(model)`` when a process group is joined (``find_unused_parameters=False``: every
    parameter must take part in every forward, which holds for our layers); the model itself otherwise."""
    if not ctx.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=False)


def all_reduce_counts(counts: Sequence[int] | Tensor, ctx: DistContext) -> list[int]:
    """Sum integer counts (e.g. ``[correct, total]`` of each split) over ranks; unchanged for one process.

    Raises:
        TypeError: a count is not an integer (a float would be truncated silently).
    """
    if isinstance(counts, Tensor):
        if counts.is_floating_point() or counts.is_complex() or counts.dtype == torch.bool:
            raise TypeError(f"counts must be integers, got a tensor of dtype {counts.dtype}")
    else:
        bad = [c for c in counts if not _is_int(c)]
        if bad:
            raise TypeError(f"counts must be integers, got {bad[0]!r} ({type(bad[0]).__name__})")
    t = torch.as_tensor(counts, dtype=torch.int64).to(ctx.device)
    if ctx.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return [int(v) for v in t.tolist()]


# ---------------------------------------------------------------------------------------------- data pipeline


def _tensors_of(batch: Any) -> Iterator[Tensor]:
    if isinstance(batch, Tensor):
        yield batch
    elif isinstance(batch, (list, tuple)):
        for item in batch:
            yield from _tensors_of(item)
    elif isinstance(batch, dict):
        for item in batch.values():
            yield from _tensors_of(item)
    elif hasattr(batch, "items") and callable(batch.items):  # PyG Data
        for _, item in batch.items():
            yield from _tensors_of(item)


class Prefetcher:
    """Iterate ``loader`` with ``to_device(batch, device, non_blocking)`` of batch ``i + 1`` issued on a side CUDA
    stream while batch ``i`` is computed on the current stream. Pinned host batches (``pin_memory=True`` in the
    loader) make those copies truly asynchronous. On a CPU it is ``to_device(batch, device, False)`` in order.

    Not PyG's ``PrefetchLoader``, which does the same overlap: it copies every attribute of a batch (``n_id``,
    ``e_id``, ``input_id`` ...), where ``to_device`` moves what the step reads (and can cast the features on the
    side stream), and it does not ``record_stream`` the copies for the stream that uses them, so the caching
    allocator may hand their memory out again while a step still reads it.
    """

    def __init__(self, loader: Iterable[Any], device: torch.device,
                 to_device: Callable[[Any, torch.device, bool], Any] | None = None) -> None:
        self.loader = loader
        self.device = device
        self.to_device = to_device or (lambda b, d, nb: b.to(d, non_blocking=nb))

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]  # typed Iterable; len() raises TypeError for an unsized one

    def __iter__(self) -> Iterator[Any]:
        if self.device.type != "cuda":
            for batch in self.loader:
                yield self.to_device(batch, self.device, False)
            return
        stream = torch.cuda.Stream(self.device)
        it = iter(self.loader)

        def issue() -> Any:
            batch = next(it, None)
            if batch is None:
                return None
            with torch.cuda.stream(stream):
                return self.to_device(batch, self.device, True)

        nxt = issue()
        while nxt is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(stream)
            for t in _tensors_of(nxt):  # allocated on the side stream, used on this one
                if t.is_cuda:
                    t.record_stream(current)
            batch, nxt = nxt, issue()
            yield batch


class _Raised:
    """An exception of the producer thread, handed to the consumer to raise."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END = object()


class BackgroundLoader:
    """Iterate ``loader`` in a background thread, up to ``ahead`` batches in front of the consumer, on a side CUDA
    stream: for loaders that make their batches on the GPU (:class:`cudnn_gnn.apps.sampler.DeviceNeighborLoader`).

    Such a loader samples with kernels and a few host syncs per batch. Inline, each sync waits for the training
    step queued before it, and the GPU then idles while the host launches the sampler's next kernels: step and
    sampling take turns. Here batch ``i + 1`` is made in another thread, on a stream of its own, while the main
    thread launches step ``i``: the sampler's syncs wait for the sampler's kernels only, its host work overlaps the
    step's (PyTorch releases the GIL inside its ops and while a sync waits), and its kernels run beside the
    step's. The stream has the highest priority, so the sampler's short kernels are not queued behind a step's
    long ones. DGL's GPU sampling runs the same way (a prefetch thread on alternate streams).

    Each batch comes with an event recorded after its last kernel; the consumer's stream waits on it before the
    batch is returned, and every CUDA tensor of the batch is marked as used on the consumer's stream
    (``record_stream``), so its memory is not reused until the step that read it is done. At most ``ahead + 1``
    batches exist at once (the one being used and those made ahead of it); a batch is made only once the consumer
    has asked for the one before it, so ``ahead=1`` holds two batches, as :class:`Prefetcher` does.

    The same batches come out in the same order as from ``iter(loader)``: the loader runs unchanged, in one
    thread, on one stream. Its work is ordered after what the consumer's stream queued before iteration starts
    (the graph's copy to the GPU), and when iteration ends, is closed or fails, the thread is joined and the
    consumer's stream waits for the side stream; so loaders that share state (``with_inputs``' relabel map) may be
    iterated one after another, never two at once. Leaving a ``for`` loop early closes the iterator when it is
    released; ``with`` or ``close()`` does it at a known point. A loop left early has had ``ahead`` batches made
    past the last it took, ``ahead + 1`` if it took none (fewer where the loader ends first): closing waits for the
    thread to make those it was free to make but had not yet (a thread slow to be scheduled), so that a loader that
    draws random numbers (the device sampler) has drawn for the same batches however the threads ran, and its next
    epoch is the same in every run with the same seed (it differs from an inline run's, which drew for none).
    ``with`` left through an exception (a failed step, Ctrl-C) does not wait: the thread stops after the batch it is
    making. A ``for`` loop's iterator released by an exception still waits (its finalizer cannot see the exception),
    and one the cyclic garbage collector closes on the loader's own thread cannot wait there, so what that thread
    made is then up to timing. An exception in the thread is raised in the consumer at the batch where it happened;
    one at a batch it never saw is dropped. On a CPU the thread runs without streams.

    Args:
        loader: an iterable of batches (tensors, or lists, tuples, dicts or PyG ``Data`` of them).
        device: where the batches are made; CUDA gets the side stream.
        ahead: batches made in front of the consumer (>= 1).
    """

    def __init__(self, loader: Iterable[Any], device: torch.device, *, ahead: int = 1) -> None:
        from cudnn_gnn._validation import check_int

        self.loader = loader
        self.device = torch.device(device)
        self.ahead = check_int("ahead", ahead, minimum=1)

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]  # typed Iterable; len() raises TypeError for an unsized one

    def __iter__(self) -> _BackgroundIterator:
        return _BackgroundIterator(self.loader, self.device, self.ahead)


_STOP_POLL_SECONDS = 0.05
"""How often the producer thread, waiting for a free slot, looks whether it was told to stop."""


def _produce(loader: Iterable[Any], device: torch.device, stream: Any, out: Any, slots: Any, stop: Any) -> None:
    """The producer thread of :class:`BackgroundLoader`: each batch of ``loader`` made on ``stream`` once a slot is
    free, put in ``out`` with an event recorded after it; then ``_END``, or the exception raised."""
    import contextlib

    try:
        if stream is not None:
            torch.cuda.set_device(device)  # the current device and stream are per thread
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            it = iter(loader)
            while True:
                # a timed wait that looks at the stop: a close on this very thread (see _BackgroundIterator.close)
                # cannot release a slot, since the semaphore's lock may be the one this thread holds
                while not slots.acquire(timeout=_STOP_POLL_SECONDS):
                    if stop.is_set():
                        return
                if stop.is_set():
                    return
                batch = next(it, _END)
                if batch is _END:
                    out.put(_END)
                    return
                event = None
                if stream is not None:
                    event = torch.cuda.Event()
                    event.record(stream)
                out.put((batch, event))
    except BaseException as exc:  # handed to the consumer, raised there
        out.put(_Raised(exc))


class _BackgroundIterator:
    def __init__(self, loader: Iterable[Any], device: torch.device, ahead: int) -> None:
        import queue

        self.device = device
        self.cuda = device.type == "cuda"
        self.stream: Any = None
        if self.cuda:
            if device.index is None:
                device = self.device = torch.device("cuda", torch.cuda.current_device())
            low, high = torch.cuda.Stream.priority_range()  # type: ignore[call-arg]  # a static method
            self.stream = torch.cuda.Stream(device, priority=min(low, high))
            self.stream.wait_stream(torch.cuda.current_stream(device))  # after the graph's copy, the map's reset
        self.queue: queue.Queue[Any] = queue.Queue()
        self.slots = threading.Semaphore(ahead + 1)
        self.stop = threading.Event()
        self.ahead = ahead
        self.holding = False  # the consumer holds a batch; its slot is freed when it asks for the next one
        self.ended = False  # the thread has returned (_END or an exception taken from the queue)
        self.done = False
        # The thread gets the queue and the primitives, not this object: a consumer that drops the iterator early
        # lets it be collected, and __del__ stops the thread.
        self.thread = threading.Thread(target=_produce, name="BackgroundLoader", daemon=True,
                                       args=(loader, device, self.stream, self.queue, self.slots, self.stop))
        self.thread.start()

    def __iter__(self) -> _BackgroundIterator:
        return self

    def __next__(self) -> Any:
        if self.done:
            raise StopIteration
        if self.holding:
            self.slots.release()
            self.holding = False
        item = self.queue.get()
        if item is _END or isinstance(item, _Raised):
            self.ended = True
            self.close()
            if isinstance(item, _Raised):
                raise item.exc
            raise StopIteration
        batch, event = item
        if self.cuda:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(event)
            for t in _tensors_of(batch):  # made on the side stream, used on this one
                if t.is_cuda:
                    t.record_stream(current)
        self.holding = True
        return batch

    def close(self, *, drain: bool = True) -> None:
        """Stop the thread, join it, and order the consumer's stream after its work. With ``drain``, first let it make
        the batches it is free to (every slot the consumer does not hold: ``ahead``, or ``ahead + 1`` before the first
        batch was taken; fewer where the loader ends or fails first): stopping it at once would leave the number of
        batches made, and so of random draws, to how the threads were scheduled. Without (the way out through an
        exception, after which the draws need not repeat) it stops after the batch it is making.

        Called on the thread itself (the cyclic garbage collector runs on whichever thread allocates, and the loader
        allocates a lot), it only tells the thread to stop after the batch it is making: the batches to wait for and
        the join are that thread's own, so waiting there would never end."""
        if self.done:
            return
        self.done = True
        if threading.current_thread() is self.thread:
            self.stop.set()  # seen by its timed wait for a slot, once back from the batch it is making
            return
        try:
            # Each free slot yields one queue item (a batch, _END or _Raised), the ones already queued included; the
            # consumer's slot is not released, so the thread then waits on the semaphore and sees the stop.
            for _ in range(self.ahead + 1 - self.holding if drain and not self.ended else 0):
                item = self.queue.get()
                if item is _END or isinstance(item, _Raised):  # the thread has returned; a failure nobody asked for
                    break
        finally:  # also when the wait is interrupted
            self.stop.set()
            self.slots.release()  # a thread waiting for a slot sees the stop
            self.thread.join()
        if self.cuda:
            torch.cuda.current_stream(self.device).wait_stream(self.stream)

    def __enter__(self) -> _BackgroundIterator:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        # A generator closed at its `yield` (GeneratorExit) is a loop over it left early: that one waits.
        self.close(drain=exc_type is None or issubclass(exc_type, GeneratorExit))

    def __del__(self) -> None:
        """Closed with the wait: released by a ``for`` loop left early, or by one an exception unwinds (a finalizer
        cannot see the exception); on the thread itself (see :meth:`close`), without."""
        if not getattr(self, "done", True):
            self.close()


class BusyMeter:
    """GPU-busy fraction of an epoch: CUDA events around each compute step, summed, over the epoch's wall time.

    ``with meter.step(): ...`` around forward/backward/optimizer; ``meter.fraction(wall_seconds)`` after a
    synchronise. On a CPU the steps are not timed and the fraction is ``None``. Steps may be timed from any thread
    (each on that thread's current stream); :func:`busy_union_seconds` counts the time several meters' steps
    overlap once.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.pairs: list[tuple[Any, Any]] = []

    def reset(self) -> None:
        self.pairs.clear()

    def step(self) -> Any:
        meter = self

        class _Step:
            def __enter__(self) -> None:
                if meter.cuda:
                    self.start = torch.cuda.Event(enable_timing=True)
                    self.start.record()

            def __exit__(self, *exc: object) -> None:
                if meter.cuda:
                    end = torch.cuda.Event(enable_timing=True)
                    end.record()
                    meter.pairs.append((self.start, end))

        return _Step()

    def busy_seconds(self) -> float | None:
        if not self.cuda:
            return None
        return sum(a.elapsed_time(b) for a, b in self.pairs) / 1e3  # events are complete after a synchronise

    def fraction(self, wall_seconds: float) -> float | None:
        busy = self.busy_seconds()
        return None if busy is None or wall_seconds <= 0 else min(1.0, busy / wall_seconds)


def busy_union_seconds(*meters: BusyMeter) -> float | None:
    """Seconds in which at least one of ``meters``' timed steps was running: their intervals' union, so steps on two
    streams that overlap (a :class:`BackgroundLoader`'s sampling beside the training step) count once. Every
    interval is placed on one time line by its events' elapsed time from a common first event (CUDA events of one
    device compare across streams). ``None`` on a CPU; 0 with nothing timed. Call after a synchronise.
    """
    if not meters or not all(m.cuda for m in meters):
        return None
    pairs = [p for m in meters for p in m.pairs]
    if not pairs:
        return 0.0
    origin = pairs[0][0]
    spans = sorted((origin.elapsed_time(a), origin.elapsed_time(b)) for a, b in pairs)
    total, lo, hi = 0.0, spans[0][0], spans[0][1]
    for a, b in spans[1:]:
        if a > hi:
            total, lo, hi = total + hi - lo, a, b
        else:
            hi = max(hi, b)
    return (total + hi - lo) / 1e3


class KernelBusyWindow:
    """The GPU's busy fraction over a window of ``count`` batches from batch ``start`` (0-based) of an epoch, from
    the kernels themselves: ``torch.profiler`` records every kernel, copy and memset of the device (CUDA activity
    only, no host ops), and the fraction is the union of their intervals over the window's wall time, between two
    synchronises. Unlike :class:`BusyMeter`'s event intervals, which span a step from its first to its last
    kernel, this counts the gaps in which the GPU waits for the host as idle. The profiler adds a little host time
    to each launch, so a host-bound step reads a little less busy than it runs unprofiled.

    ``before(i)`` and ``after(i)`` around batch ``i``'s work; ``fraction``, ``busy_seconds`` and
    ``window_seconds`` once the window has closed (``None`` before, on a CPU, and when ``count`` is 0 or the epoch
    ended first). ``kernels`` counts the GPU activities recorded. ``cost_seconds`` is all the window added to the
    epoch's wall time (the profiler's start, which loads CUPTI on first use, the profiled batches, the stop and the
    event parsing): the rest of the epoch ran unprofiled, and :meth:`busy_estimate` divides the kernel time of a
    profiled batch by the wall time of an unprofiled one, the busy fraction without the profiler's host cost.
    """

    def __init__(self, device: torch.device, *, start: int, count: int) -> None:
        self.cuda = torch.device(device).type == "cuda"
        self.device, self.start, self.count = torch.device(device), start, count
        self.fraction: float | None = None
        self.busy_seconds: float | None = None
        self.window_seconds: float | None = None
        self.cost_seconds = 0.0
        self.kernels = 0
        self._prof: Any = None
        self._t0 = self._t_start = 0.0

    def before(self, i: int) -> None:
        if not self.cuda or self.count <= 0 or i != self.start:
            return
        import time

        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize(self.device)
        self._t_start = time.perf_counter()
        self._prof = profile(activities=[ProfilerActivity.CUDA])
        self._prof.__enter__()
        self._t0 = time.perf_counter()

    def after(self, i: int) -> None:
        if self._prof is None or i != self.start + self.count - 1:
            return
        import time

        torch.cuda.synchronize(self.device)
        wall = time.perf_counter() - self._t0
        self._prof.__exit__(None, None, None)
        spans = sorted((e.time_range.start, e.time_range.end) for e in self._prof.events()
                       if e.device_type == torch.autograd.DeviceType.CUDA)
        self._prof = None
        busy, hi = 0.0, -math.inf
        for a, b in spans:  # microseconds; the union, overlapping kernels (two streams) once
            busy += max(0.0, b - max(a, hi))
            hi = max(hi, b)
        self.kernels, self.window_seconds, self.busy_seconds = len(spans), wall, busy / 1e6
        self.fraction = min(1.0, self.busy_seconds / wall) if wall > 0 else None
        self.cost_seconds = time.perf_counter() - self._t_start

    def busy_estimate(self, epoch_seconds: float, epoch_batches: int) -> float | None:
        """Kernel seconds of a profiled batch over the wall seconds of an unprofiled one (the epoch's time and
        batches outside the window); ``None`` where the window did not close or nothing ran outside it."""
        outside, rest = epoch_seconds - self.cost_seconds, epoch_batches - self.count
        if self.busy_seconds is None or outside <= 0 or rest <= 0:
            return None
        return min(1.0, (self.busy_seconds / self.count) / (outside / rest))


def pyg_wheel_url() -> str:
    """PyG's wheel index for this torch build: ``https://data.pyg.org/whl/torch-<major>.<minor>.0+<cpu|cuXYZ>.html``
    (PyG builds one index per torch minor release, named by its ``.0``: torch 2.13.1 takes torch-2.13.0's)."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    cuda = torch.version.cuda
    tag = f"cu{cuda.replace('.', '')}" if cuda else "cpu"
    return f"https://data.pyg.org/whl/torch-{major}.{minor}.0+{tag}.html"


def sampler_available() -> bool:
    """Whether PyG's ``NeighborLoader`` can sample here (``pyg-lib`` or ``torch-sparse`` installed)."""
    import torch_geometric.typing as pyg_typing

    return bool(pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE)


def sampler_reports_hops() -> bool:
    """Whether a ``NeighborLoader`` batch carries per-hop counts (``num_sampled_nodes``/``num_sampled_edges``), so
    that each layer can run on its trimmed block: ``pyg-lib``'s sampler reports them, ``torch-sparse``'s does not
    (every layer then runs on the whole batch)."""
    import torch_geometric.typing as pyg_typing

    return bool(pyg_typing.WITH_PYG_LIB)


def mapped_neighbor_loader(colptr: Tensor, row: Tensor, *, node_attrs: dict[str, Tensor], input_nodes: Tensor,
                           fanout: list[int], batch_size: int, shuffle: bool = False, num_workers: int = 0,
                           pin_memory: bool = False, **kwargs: Any) -> Any:
    """PyG's ``NeighborLoader`` over a CSC held in host memory (``colptr [N + 1]``, ``row [E]``, int64, usually
    memory-mapped), without the copy and sort ``NeighborLoader(data)`` makes of ``edge_index`` in every process.

    The sampler is PyG's ``NeighborSampler``, built on an empty graph and given the CSC (its ``colptr``/``row``/
    ``perm`` attributes, which PyG's own ``to_csc`` would otherwise fill). ``node_attrs`` (``x``, ``y``: ``[N, ...]``,
    memory-mapped or shared) are gathered for the sampled nodes in the loader workers. A batch has PyG's fields:
    ``n_id``, ``edge_index`` (local, hop by hop), ``batch_size``, ``num_sampled_nodes``/``num_sampled_edges``
    (pyg-lib), and the gathered attributes.

    Raises:
        RuntimeError: neither ``pyg-lib`` nor ``torch-sparse`` is installed (the message has the pip command).
    """
    if not sampler_available():
        raise RuntimeError(
            "sampled training needs pyg-lib or torch-sparse for PyG's NeighborLoader, and neither is installed; "
            f"install one with: pip install pyg-lib -f {pyg_wheel_url()}")
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.sampler import NeighborSampler

    n = colptr.numel() - 1
    if colptr.dtype != torch.int64 or row.dtype != torch.int64:
        raise TypeError(f"colptr and row must be int64 (the samplers' index type), got {colptr.dtype}, {row.dtype}")
    empty = torch.empty(2, 0, dtype=torch.int64)
    data = Data(edge_index=empty, num_nodes=n, **node_attrs)
    sampler = NeighborSampler(Data(edge_index=empty, num_nodes=n), num_neighbors=fanout)
    sampler.colptr, sampler.row, sampler.perm = colptr, row, None
    kwargs.setdefault("persistent_workers", num_workers > 0)
    return NeighborLoader(data, num_neighbors=fanout, input_nodes=input_nodes, batch_size=batch_size,
                          shuffle=shuffle, num_workers=num_workers, pin_memory=pin_memory, neighbor_sampler=sampler,
                          **kwargs)


# ---------------------------------------------------------------------------------------------- memory model


def sampled_hop_sizes(batch_size: int, fanout: Sequence[int], num_nodes: int | None = None,
                      num_edges: int | None = None) -> tuple[list[int], list[int]]:
    """Upper bounds of the nodes and edges a ``NeighborLoader`` batch adds per hop: hop 0 holds the seeds, hop
    ``l + 1`` at most ``nodes[l] * fanout[l]`` new nodes (no two sampled neighbours coinciding), capped by the
    graph; ``edges[l] = nodes[l] * fanout[l]``, capped by ``num_edges``. A fan-out of -1 (every in-edge) has no
    bound but the graph's: ``num_edges`` edges. Real batches are smaller where neighbourhoods overlap (hubs).

    Raises:
        ValueError: a fan-out of -1 without ``num_edges``.
    """
    nodes, edges = [batch_size], []
    cap = num_nodes if num_nodes is not None else math.inf
    for hop, f in enumerate(fanout):
        if num_edges is None:
            if f < 0:
                raise ValueError(f"num_edges must be given for fanout[{hop}] = {f} (every in-edge), got None")
            e = nodes[-1] * f
        else:
            e = num_edges if f < 0 else min(nodes[-1] * f, num_edges)
        edges.append(e)
        nodes.append(int(min(e, max(cap - sum(nodes), 0))))
    return nodes, edges


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of one sampled training run (see ``docs/scale.md`` for the formulas). Host figures are per host
    (shared by the ranks) unless named per rank; GPU figures are per GPU."""

    host_features: int
    host_structure: int
    host_labels: int
    host_per_rank: int
    host_total: int
    gpu_model_state: int
    gpu_batch_inputs: int
    gpu_structure_per_batch: int
    gpu_activations: int
    gpu_backward_transient: int
    gpu_total: int
    batch_nodes: int
    batch_edges: int
    gpu_resident_graph: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def summary(self) -> str:
        gib = 2**30
        graph = f"resident graph {self.gpu_resident_graph / gib:.2f}, " if self.gpu_resident_graph else ""
        return (f"memory model: host {self.host_total / gib:.1f} GiB (features {self.host_features / gib:.1f}, "
                f"structure {self.host_structure / gib:.1f}, per rank {self.host_per_rank / gib:.2f}); GPU "
                f"{self.gpu_total / gib:.2f} GiB per rank ({graph}model state {self.gpu_model_state / gib:.2f}, batch "
                f"{(self.gpu_batch_inputs + self.gpu_structure_per_batch) / gib:.2f}, activations "
                f"{self.gpu_activations / gib:.2f}, backward transient {self.gpu_backward_transient / gib:.2f}; "
                f"{self.batch_nodes:,} nodes, {self.batch_edges:,} edges per batch)")


def _is_int(value: object) -> bool:
    """An integer (Python's, numpy's), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_count(name: str, value: object, low: int) -> None:
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low:  # type: ignore[operator]
        raise ValueError(f"{name} must be >= {low}, got {value}")


def estimate_memory(*, num_nodes: int, num_edges: int, num_features: int, num_classes: int, batch_size: int,
                    fanout: Sequence[int], hidden: int, heads: int, model: str = "gat", feature_bytes: int = 4,
                    act_bytes: int = 4, ranks: int = 1, num_workers: int = 0, params: int | None = None,
                    hop_nodes: Sequence[int] | None = None, hop_edges: Sequence[int] | None = None,
                    trimmed: bool = True, sampler: str = "pyg", label_bytes: int = 8,
                    sample_ahead: int = 0) -> MemoryEstimate:
    """Predict host and GPU bytes of neighbour-sampled training of the example's GAT (``len(fanout)`` layers of
    ``heads x hidden``, the last averaging ``heads`` heads into ``num_classes``, a residual linear map per layer).

    Host, once per host: features ``N F feature_bytes``, CSC ``8 (N + 1) + 8 E`` (int64: the samplers' type),
    labels ``N label_bytes`` (8: int64; the synthetic papers100M stores 4-byte labels). Per rank: one batch's
    gathered features and structure in each of ``num_workers + 1`` in-flight slots (pinned). GPU per rank:
    parameters, gradients, Adam's two moments (``16`` bytes per parameter, ``+4`` for DDP's gradient buckets when
    ``ranks > 1``), two batches' inputs (the prefetched next one), and per layer ``l`` on its trimmed block
    (``n_src`` sources, ``n_dst`` targets, ``e`` edges):

    - ours: ``act_bytes (n_src (C_in + HC) + 3 n_dst HC) + 4 (n_src + 2 n_dst) H + 16 e`` (layer input and
      projection saved for backward, output, residual, activation; per-node scores and log-sum-exp in fp32;
      COO int64 edge index, CSC indices and permutation);
    - PyG: the same plus the per-edge messages ``[E, H, C]`` (``act_bytes e HC``, kept for backward) and the
      attention ``[E, H]`` in three forms (logits, softmax, dropout; ``12 e H``).

    On top of what is saved, the backward's transient buffers at the widest hidden layer (``n_dst`` targets,
    ``e`` edges, ``K = H C``): ours ``3 * 4 n_dst K`` (the float32 gradients through its dropout, activation and
    bias addition: under autocast the bias is float32, so these tensors are float32); PyG also ``3 act_bytes e K``
    (the gradients of its ``[E, H, C]`` messages and gathered rows, and their product for the attention's gradient).
    The counts (3) are read off the layers' structure, not fitted.

    ``hop_nodes``/``hop_edges``: measured per-hop counts of a batch (``num_sampled_nodes``/``num_sampled_edges``);
    default :func:`sampled_hop_sizes`' upper bounds. ``params``: the model's parameter count if known.
    ``trimmed=False``: every layer runs on the whole batch (``n_src = n_dst`` = the batch's nodes, ``e`` its edges),
    as it does where the sampler reports no per-hop counts (:func:`sampler_reports_hops`; torch-sparse's). How the
    predictions compare with measured peaks: docs/scale.md.

    ``sampler="device"`` (:class:`cudnn_gnn.apps.sampler.DeviceNeighborLoader`): every GPU also holds the graph
    (``gpu_resident_graph``: features, labels and the int64 CSC as on the host, plus the sampler's ``8 (N + 1)``
    relabel map), the batch is sampled there (one batch's inputs, plus ``sample_ahead`` more made ahead by a
    :class:`BackgroundLoader`), and there are no loader workers or pinned batches on the host (``host_per_rank =
    0``; the host still holds the mapped files it copied from). ``"pyg"``: PyG's ``NeighborLoader`` on the host, as
    above.

    Raises:
        TypeError: a count or size is not an int.
        ValueError: a count or size out of range (a batch size < 1, a negative hop count ...), an unknown model or
            sampler.
    """
    if model not in ("gat", "pyg-gat"):
        raise ValueError(f"model must be 'gat' or 'pyg-gat', got {model!r}")
    if sampler not in ("pyg", "device"):
        raise ValueError(f"sampler must be 'pyg' or 'device', got {sampler!r}")
    for name, value, low in (("num_nodes", num_nodes, 1), ("num_edges", num_edges, 0),
                             ("num_features", num_features, 1), ("num_classes", num_classes, 1),
                             ("batch_size", batch_size, 1), ("hidden", hidden, 1), ("heads", heads, 1),
                             ("feature_bytes", feature_bytes, 1), ("act_bytes", act_bytes, 1), ("ranks", ranks, 1),
                             ("num_workers", num_workers, 0), ("label_bytes", label_bytes, 1),
                             ("sample_ahead", sample_ahead, 0)):
        _check_count(name, value, low)
    if params is not None:
        _check_count("params", params, 0)
    if len(fanout) == 0 or any(not _is_int(f) or (f < 1 and f != -1) for f in fanout):
        raise ValueError(f"fanout must be one int >= 1 (or -1: all) per layer, got {list(fanout)}")
    for name, measured in (("hop_nodes", hop_nodes), ("hop_edges", hop_edges)):
        if measured is not None and any(not _is_int(h) or h < 0 for h in measured):
            raise ValueError(f"{name} must be counts >= 0, got {list(measured)}")
    L = len(fanout)
    if hop_nodes is None or hop_edges is None:
        hop_nodes, hop_edges = sampled_hop_sizes(batch_size, fanout, num_nodes, num_edges)
    hop_nodes, hop_edges = list(hop_nodes), list(hop_edges)
    H, C = heads, hidden
    if params is None:  # per layer: lin (in x H out), res and bias (in x total, total), att_src/att_dst
        params, c_in = 0, num_features
        for i in range(L):
            out = num_classes if i == L - 1 else C
            total = out if i == L - 1 else H * out  # the last layer averages its heads
            params += c_in * H * out + c_in * total + total + 2 * H * out
            c_in = H * C
    batch_nodes, batch_edges = sum(hop_nodes), sum(hop_edges)

    act = transient = 0
    c_in = num_features
    for i in range(L):
        hops = L - i
        if trimmed:
            n_src, n_dst, e = sum(hop_nodes[: hops + 1]), sum(hop_nodes[:hops]), sum(hop_edges[:hops])
        else:
            n_src, n_dst, e = batch_nodes, batch_nodes, batch_edges
        e += n_dst  # self-loops
        hc = H * (num_classes if i == L - 1 else C)
        layer = act_bytes * (n_src * (c_in + hc) + 3 * n_dst * hc) + 4 * (n_src + 2 * n_dst) * H + 16 * e
        if model == "pyg-gat":
            layer += act_bytes * e * hc + 12 * e * H
        act += layer
        if i < L - 1:  # a hidden layer: bias, activation and dropout after it
            transient = max(transient, 3 * 4 * n_dst * hc + (3 * act_bytes * e * hc if model == "pyg-gat" else 0))
        c_in = H * C

    batch_in = batch_nodes * (num_features * feature_bytes + 8 + 8) + 16 * batch_edges  # x, n_id, y, edge_index
    host_features = num_nodes * num_features * feature_bytes
    host_structure = 8 * (num_nodes + 1) + 8 * num_edges
    host_labels = label_bytes * num_nodes
    gpu_state = (16 + (4 if ranks > 1 else 0)) * params
    if sampler == "device":  # the graph on every GPU, batches sampled there: no workers, no pinned copies
        host_per_rank, gpu_inputs = 0, (1 + sample_ahead) * batch_in
        resident = host_features + host_structure + host_labels + 8 * (num_nodes + 1)
    else:
        host_per_rank = (num_workers + 1) * 2 * batch_in  # in-flight batches (prefetch factor 2), pinned copies
        gpu_inputs, resident = 2 * batch_in, 0  # the current batch and the prefetched next one
    return MemoryEstimate(
        host_features=host_features, host_structure=host_structure, host_labels=host_labels,
        host_per_rank=host_per_rank,
        host_total=host_features + host_structure + host_labels + ranks * host_per_rank,
        gpu_model_state=gpu_state, gpu_batch_inputs=gpu_inputs, gpu_structure_per_batch=16 * batch_edges,
        gpu_activations=act, gpu_backward_transient=transient,
        gpu_total=resident + gpu_state + gpu_inputs + 16 * batch_edges + act + transient,
        batch_nodes=batch_nodes, batch_edges=batch_edges, gpu_resident_graph=resident)
