"""Launching our Triton kernels with Triton's per-call dispatch cached (:func:`cached_launch`).

``kernel[grid](*args, **kwargs)`` on a ``triton.JITFunction`` does, on every call, what only the first call of a
variant needs: it binds the arguments by name, asks Triton's C specializer for each argument's type and alignment,
hashes that into a cache key, checks the kernel's global variables and builds the launch metadata, then calls the
compiled kernel's launcher. On a small graph a step is host time, and that dispatch is most of each launch (a
kernel with our ~30 arguments: measured in docs/performance.md, "Launch cost"). :class:`CachedLaunch` keeps the
call syntax and does Triton's first call for each variant, then launches the ``CompiledKernel`` it returned
directly, through the same launcher Triton calls (``CompiledKernel.run``), on the current device's current stream.

A variant is looked up by a key at least as fine as Triton's own: per positional argument (:func:`args_key`), per
tensor its dtype and whether its address is 16-byte aligned, per integer whether it is 1, whether it is a multiple
of 16 and its width class (int32, int64, uint64), per float, bool and None the type; the value of every constexpr,
positional (GAT's backward passes ``heads, c`` so) or keyword; the launch options and the current device. Triton
specializes on exactly those properties (its ``BaseBackend``: ``tt.divisibility`` 16 for aligned pointers and
multiples of 16; integers of 1 as constants; the integer types by range; a constexpr by its value), so two calls
with one key run the same compiled kernel under Triton's own dispatch too. A positional constexpr keyed by its
integer class alone would send a layer of 6 channels a head to the variant compiled for 7 (both neither 1 nor a
multiple of 16, one padded tile): rows read at the wrong width, wrong gradients.

Where the shortcut's assumptions do not hold, the call takes Triton's own path, unchanged:
- a Triton version whose launch convention was not read and measured here (:data:`TESTED_TRITON`: the compiled
  kernel's ``run(gridX, gridY, gridZ, stream, function, packed_metadata, launch_metadata, enter_hook, exit_hook,
  *all_arguments)``, constexprs included, as ``JITFunction.run`` calls it in 3.6 and 3.9);
- Triton's interpreter (``TRITON_INTERPRET=1``: the kernels are not ``JITFunction`` objects and are returned
  undecorated), a kernel with ``pre_run_hooks``, launch hooks registered (profilers such as Proton), a callable
  grid, and an argument of another type (tensor descriptors, tuples).
What it gives up: Triton's check that a kernel's global variables did not change since it was compiled (our
kernels read no mutable globals), and Triton knobs changed after a variant's first launch in a process (debug,
instrumentation) are not seen by that variant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import triton
from triton.runtime import driver

__all__ = ["CachedLaunch", "TESTED_TRITON", "args_key", "cached_launch", "fast_path_supported"]

TESTED_TRITON = ((3, 6), (3, 9))
"""The Triton versions (major, minor) between which, inclusive, the compiled kernels' launch convention was read
in Triton's source (3.6 on the H200's image, 3.9 on the CPU machines) and the shortcut measured (3.6)."""

def _version() -> tuple[int, int]:
    parts = triton.__version__.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def fast_path_supported() -> bool:
    """Whether this Triton's version is within :data:`TESTED_TRITON` (else every launch takes Triton's path)."""
    return TESTED_TRITON[0] <= _version() <= TESTED_TRITON[1]


_SUPPORTED = fast_path_supported()
_INT32 = (-(2**31), 2**31 - 1)
_UINT64_MIN = 2**63


def _int_key(v: int) -> int:
    """Triton's view of an integer argument, as one small int: 1 itself (a constant), else bit 0 a multiple of 16
    (``tt.divisibility``), bit 1 outside int32, bit 2 at least 2**63 (``u64``)."""
    if v == 1:
        return -1
    key = 0 if v % 16 else 1
    if not _INT32[0] <= v <= _INT32[1]:
        key |= 2
        if v >= _UINT64_MIN:
            key |= 4
    return key


def args_key(args: Sequence[Any]) -> tuple[Any, ...] | None:
    """The specialization key of positional kernel arguments (see the module docstring), or None where one of them
    is of a type the shortcut does not know (that call then takes Triton's own dispatch).

    ``bool`` is tested before ``int`` (a subclass of it), and tensors by ``isinstance`` (``nn.Parameter`` too)."""
    key: list[Any] = []
    append = key.append
    for a in args:  # tensors first: most arguments are
        if isinstance(a, torch.Tensor):
            append(a.dtype)
            append(a.data_ptr() % 16 == 0)
            continue
        t = type(a)
        if t is bool:
            append(bool)
        elif t is int:
            append(_int_key(a))
        elif t is float:
            append(float)
        elif a is None:
            append(None)
        else:
            return None
    return tuple(key)


_RUNTIME = getattr(getattr(triton, "knobs", None), "runtime", None)


def _hooks_active() -> bool:
    """Whether Triton has launch hooks registered (a profiler): those need Triton's own launch path."""
    if _RUNTIME is None:
        return True
    for hook in (_RUNTIME.launch_enter_hook, _RUNTIME.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):  # 3.6: a HookChain, active when it holds calls
            return True
    return False


class _Variant:
    """One compiled variant: its launcher, CUDA function and packed metadata, and the keyword arguments' values
    that complete the argument list in signature order (constexprs too: the launcher skips them itself)."""

    __slots__ = ("function", "metadata", "run", "tail")

    def __init__(self, compiled: Any, tail: tuple[Any, ...]) -> None:
        self.run = compiled.run
        self.function = compiled.function
        self.metadata = compiled.packed_metadata
        self.tail = tail


class CachedLaunch:
    """A ``triton.JITFunction`` launched as ``kernel[grid](*args, **kwargs)``, each variant's dispatch done once.

    ``args`` are the kernel's leading parameters, positionally; ``kwargs`` must name all the others (constexprs)
    and may add launch options (``num_warps``, ``num_stages``). ``fn`` stays reachable as ``.fn`` (its name as
    ``__name__``) for the code that inspects Triton's own caches."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__doc__ = getattr(fn, "__doc__", None)
        self._arg_names: tuple[str, ...] = tuple(fn.arg_names)
        # the positions of the constexpr parameters: a call that passes one positionally is keyed by its value
        self._constexpr_at: tuple[int, ...] = tuple(i for i, p in enumerate(fn.params) if p.is_constexpr)
        self._variants: dict[tuple[Any, ...], _Variant] = {}

    def __getitem__(self, grid: Sequence[int] | Callable[..., Any]) -> Callable[..., None]:
        return lambda *args, **kwargs: self.launch(grid, args, kwargs)

    def __repr__(self) -> str:
        return f"CachedLaunch({self.__name__}, {len(self._variants)} variants)"

    def variants(self) -> int:
        """How many variants the shortcut holds (each built by one call through Triton's own dispatch)."""
        return len(self._variants)

    def key(self, args: tuple[Any, ...], kwargs: dict[str, Any], device: Any) -> tuple[Any, ...] | None:
        """The variant key of a launch with ``args`` and ``kwargs`` on ``device`` (see the module docstring), or
        None where an argument's type is unknown to the shortcut (Triton's own dispatch then)."""
        akey = args_key(args)
        if akey is None:
            return None
        n_args = len(args)
        return (device, akey, tuple(args[i] for i in self._constexpr_at if i < n_args), *kwargs.items())

    def launch(self, grid: Sequence[int] | Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Launch ``fn`` over ``grid`` (up to three dimensions) with ``args`` and ``kwargs``."""
        if not _SUPPORTED or callable(grid) or getattr(self.fn, "pre_run_hooks", True) \
                or _hooks_active():
            self.fn[grid](*args, **kwargs)
            return
        device = driver.active.get_current_device()
        key = self.key(args, kwargs, device)
        if key is None:
            self.fn[grid](*args, **kwargs)
            return
        variant = self._variants.get(key)
        if variant is None:  # Triton's own dispatch: compiles (or finds) the variant and launches it
            compiled = self.fn[grid](*args, **kwargs)
            if hasattr(compiled, "result"):  # an asynchronous compile's future
                compiled = compiled.result()
            rest = self._arg_names[len(args):]
            if compiled is not None and all(name in kwargs for name in rest):  # else: Triton's dispatch every time
                self._variants[key] = _Variant(compiled, tuple(kwargs[name] for name in rest))
            return
        n = len(grid)
        variant.run(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, driver.active.get_current_stream(device),
                    variant.function, variant.metadata, None, None, None, *args, *variant.tail)


def cached_launch(fn: Any) -> Any:
    """Decorate a ``@triton.jit`` kernel (outermost) with :class:`CachedLaunch`; under Triton's interpreter, or on
    an untested Triton, return it as it is."""
    if not isinstance(fn, triton.runtime.JITFunction) or not _SUPPORTED:
        return fn
    return CachedLaunch(fn)
