"""The backends a cell is timed on: ours and the anchors, behind one small interface.

    backend.prepare(cell, q, k, v) -> (fn, out)   # fn() launches once on torch's current stream
    backend.context()                             # entered around warm-up and timing

q, k, v are torch tensors laid out (batch, seqlen, heads, head_dim); `out` is that layout too.
A backend that cannot run a cell raises Unavailable with the reason, which the grid records.
"""

from __future__ import annotations

import contextlib
import inspect
import time

from cubinforge.runtime.axes import default_axes

from .variants import arch_of_capability

BACKENDS = ("ours", "cudnn", "flash2", "fa4")
ANCHORS = ("cudnn", "flash2", "fa4")


class Unavailable(Exception):
    """This backend does not run this cell (or at all); the message says why."""


def first_line(e: BaseException, limit: int = 300) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    line = text[0] if text else type(e).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _stream_handle() -> int:
    import torch

    return int(torch.cuda.current_stream().cuda_stream)


class _PinnedSource:
    """A registry source that shows one variant only: passed as flash_attn_func(source=...),
    it makes the runtime launch exactly that variant (its selection is otherwise by axes)."""

    def __init__(self, base, name: str):
        self.base, self.name = base, name

    def __repr__(self) -> str:
        return f"PinnedSource({self.name!r} of {self.base!r})"

    def list(self):
        return [self.name]

    def get(self, name: str):
        return self.base.get(name)

    def blob(self, sha256: str):
        return self.base.blob(sha256)


class Ours:
    """cubinforge.runtime.flash_attn_func; the variant that ran is read from last_launch().

    A variant is pinned through the runtime's `source=` keyword (a one-variant source) where
    the runtime has it. Grid cells wrap their tensors once with `as_device_array`, so a timed
    call is the launch path alone; `host_us` records what a call with torch tensors costs.
    """

    name = "ours"
    UNREACHABLE_AXES = tuple(default_axes())  # not the dense path

    def __init__(self):
        import torch

        t0 = time.perf_counter()
        import cubinforge.runtime as rt

        self.import_s = time.perf_counter() - t0
        if not hasattr(rt, "flash_attn_func"):
            raise Unavailable("cubinforge.runtime has no flash_attn_func")
        self.rt = rt
        self.fn = rt.flash_attn_func
        params = inspect.signature(self.fn).parameters
        self.can_pin = "source" in params and hasattr(rt, "LocalSource")
        self._pinned: dict[str, _PinnedSource] = {}  # kept alive: the runtime caches by id()
        self.device_arch = arch_of_capability(*torch.cuda.get_device_capability())

    def unreachable(self, variant) -> str | None:
        """Why flash_attn_func cannot launch this variant (None if it can)."""
        on = [a for a in self.UNREACHABLE_AXES if variant.axes.get(a)]
        if variant.axes.get("head_dim_v", variant.head_dim) != variant.head_dim:
            on.append("head_dim_v")             # v and o have their own head dim: not the sweep's shapes
        return f"axes {on} are not reachable through flash_attn_func" if on else None

    def last_variant(self) -> str | None:
        get = getattr(self.rt, "last_launch", None)
        info = get() if get is not None else None
        if info is None or isinstance(info, str):
            return info
        if isinstance(info, dict):
            return info.get("variant") or info.get("name")
        val = getattr(info, "variant", None) or getattr(info, "name", None)
        return str(val) if val is not None else str(info)

    def _source(self, variant: str | None):
        if not (variant and self.can_pin):
            return {}
        src = self._pinned.get(variant)
        if src is None:
            src = self._pinned[variant] = _PinnedSource(self.rt.LocalSource(), variant)
        return {"source": src}

    def launch(self, q, k, v, causal, out, lse, variant: str | None = None) -> str | None:
        self.fn(q, k, v, causal=causal, out=out, lse=lse, stream=_stream_handle(),
                **self._source(variant))
        return self.last_variant()

    def prepare(self, cell, q, k, v, variant: str | None = None):
        import torch

        pin = self._source(variant)
        out = torch.empty_like(q)
        lse = torch.empty(cell.batch, cell.heads, cell.seqlen_q, device=q.device,
                          dtype=torch.float32)
        stream = _stream_handle()
        args = (q, k, v, out, lse)
        wrap = getattr(self.rt, "as_device_array", None)
        if wrap is not None:
            try:
                args = tuple(wrap(x, stream=stream) for x in args)
            except Exception:  # noqa: BLE001 - fall back to passing the tensors themselves
                args = (q, k, v, out, lse)
        qa, ka, va, oa, la = args

        def fn():
            self.fn(qa, ka, va, causal=cell.causal, out=oa, lse=la, stream=stream, **pin)
        return fn, out

    def host_us(self, cell, q, k, v, out, calls: int = 20) -> float:
        """Host time of one call with torch tensors (DLPack each time), without syncing."""
        import torch

        lse = torch.empty(cell.batch, cell.heads, cell.seqlen_q, device=q.device,
                          dtype=torch.float32)
        stream = _stream_handle()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            self.fn(q, k, v, causal=cell.causal, out=out, lse=lse, stream=stream)
        t = (time.perf_counter() - t0) / calls * 1e6
        torch.cuda.synchronize()
        return t

    def context(self):
        return contextlib.nullcontext()


class Sdpa:
    """torch SDPA restricted to one backend (cuDNN or torch's flash, i.e. FA2)."""

    def __init__(self, name: str):
        import torch
        from torch.nn.attention import SDPBackend

        self.name = name
        member = {"cudnn": "CUDNN_ATTENTION", "flash2": "FLASH_ATTENTION"}[name]
        if not hasattr(SDPBackend, member):
            raise Unavailable(f"torch {torch.__version__} has no SDPBackend.{member}")
        if name == "cudnn" and not torch.backends.cudnn.is_available():
            raise Unavailable("cuDNN is not available to torch")
        self.backend = getattr(SDPBackend, member)

    def context(self):
        from torch.nn.attention import sdpa_kernel

        return sdpa_kernel([self.backend])

    def prepare(self, cell, q, k, v):
        """Try q/k/v as (b, h, s, d) views of our (b, s, h, d) tensors (no copy, the memory
        ours reads); if this backend refuses those strides, use contiguous copies."""
        import torch.nn.functional as F

        kw = {}
        if cell.causal and cell.seqlen_q == cell.seqlen_k:
            kw["is_causal"] = True
        elif cell.causal:
            from torch.nn.attention.bias import causal_lower_right

            kw["attn_mask"] = causal_lower_right(cell.seqlen_q, cell.seqlen_k)
        if cell.heads != cell.heads_kv:
            kw["enable_gqa"] = True
        box = {}
        errors = []
        for layout in ("bshd-view", "bhsd-contiguous"):
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            if layout == "bhsd-contiguous":
                qt, kt, vt = (x.contiguous() for x in (qt, kt, vt))

            def fn(qt=qt, kt=kt, vt=vt):
                box["out"] = F.scaled_dot_product_attention(qt, kt, vt, **kw)
            try:
                with self.context():
                    fn()
                box["layout"] = layout
                return fn, box
            except RuntimeError as e:
                from .correctness import _is_sticky

                if _is_sticky(e):
                    raise
                errors.append(f"{layout}: {first_line(e, 160)}")
        raise Unavailable("; ".join(errors))


class Fa4:
    """flash-attn-4 (`flash_attn.cute.flash_attn_func`), JIT-compiled on first call."""

    name = "fa4"

    def __init__(self):
        t0 = time.perf_counter()
        try:
            from flash_attn.cute import flash_attn_func
        except Exception as e:  # noqa: BLE001 - any import failure means "not here"
            raise Unavailable(f"flash_attn.cute not importable ({first_line(e)})") from None
        self.import_s = time.perf_counter() - t0
        self.fn = flash_attn_func

    def context(self):
        return contextlib.nullcontext()

    def prepare(self, cell, q, k, v):
        box = {}

        def fn():
            r = self.fn(q, k, v, causal=cell.causal)
            box["out"] = r[0] if isinstance(r, (tuple, list)) else r
        return fn, box


def output_of(backend_name: str, out):
    """The (b, s, h, d) output tensor of a prepared backend after its fn() ran."""
    if isinstance(out, dict):
        o = out.get("out")
        if o is None:
            return None
        return o.transpose(1, 2) if backend_name in ("cudnn", "flash2") else o
    return out


def make_backends(names, log=print) -> tuple[dict, dict]:
    """({name: backend}, {name: reason it is unavailable})."""
    made, missing = {}, {}
    for n in names:
        try:
            if n == "ours":
                made[n] = Ours()
            elif n in ("cudnn", "flash2"):
                made[n] = Sdpa(n)
            elif n == "fa4":
                made[n] = Fa4()
            else:
                missing[n] = f"unknown backend {n!r}"
        except Unavailable as e:
            missing[n] = str(e)
        except Exception as e:  # noqa: BLE001
            missing[n] = first_line(e)
        if n in missing:
            log(f"  backend {n}: unavailable: {missing[n]}")
    return made, missing
