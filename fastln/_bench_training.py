"""Speed of the training ops against torch and the floor: ``python -m fastln._bench_training``.

One thread for fastln and torch; every implementation runs on the same arrays, interleaved round
by round, and keeps its best round. fastln and torch both allocate their results. The floors: a
backward pass reads x and dy and writes dx, like ``np.add(x, dy, out=dx)``; a forward pass reads
x and writes y, like ``np.multiply(x, c, out=y)``. The peers:

  layer_norm_backward   torch.ops.aten.native_layer_norm_backward (dx, dweight, dbias)
  rms_norm_backward     torch autograd through torch.nn.functional.rms_norm (dx, dweight; the
                        time includes torch's forward: its CPU build has no separate backward op)
  rms_norm              torch.nn.functional.rms_norm

--dtype float16 or bfloat16 (ml_dtypes) runs the same with 16-bit x, dy and outputs: fastln's
weight, bias and statistics float32, torch's all of x's dtype (its own layer norm statistics), and
a floor of float32 arrays with the same bytes (NumPy adds 16-bit floats one at a time).

fastln.bench can add these rows to its report with training_rows().
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import fastln
from fastln import bench as _bench

SHAPES: Tuple[Tuple[int, int], ...] = ((8192, 128), (4096, 768), (1024, 4096), (128, 32768))
# --quick: the shapes of python -m fastln.bench --quick, which span the regimes (call overhead, L2-
# resident, streaming from L3 or memory, long and short rows). SHAPES are all large: there fastln
# and torch both run near the floor, and the ratio between them says little about either.
QUICK_SHAPES: Tuple[Tuple[int, int], ...] = tuple(_bench.QUICK_SHAPES)
OPS = ("layer_norm_backward", "rms_norm_backward", "rms_norm")
DTYPES = ("float32", "float16", "bfloat16")


def _best(fns: Sequence[Optional[Callable[[], object]]], rounds: int,
          round_time: float = 2e-3) -> List[Optional[float]]:
    """Seconds per call of each fn, its best round. A round repeats a fn enough times to last about
    round_time (small shapes take microseconds, near the timer's own noise)."""
    reps: List[int] = []
    for f in fns:
        if f is None:
            reps.append(0)
            continue
        t = time.perf_counter()
        f()
        reps.append(max(1, int(round_time / max(time.perf_counter() - t, 1e-7))))
    best: List[Optional[float]] = [None if f is None else math.inf for f in fns]
    for _ in range(rounds):
        for i, f in enumerate(fns):
            if f is None:
                continue
            t = time.perf_counter()
            for _ in range(reps[i]):
                f()
            best[i] = min(best[i], (time.perf_counter() - t) / reps[i])  # type: ignore[type-var]
    return best


def _cases(op: str, x, dy, w, b, torch):
    """(fastln, torch or None, floor) callables for op on these arrays."""
    n = x.shape[-1]
    half = x.dtype.itemsize == 2
    # The floor's arrays: float32 of the same bytes for 16-bit x.
    fx, fdy = (a.reshape(-1).astype(np.float32)[: a.size // 2] if half else a for a in (x, dy))
    out = np.empty_like(fx)
    if op == "rms_norm":
        fl = lambda: fastln.rms_norm(x, w, 1e-6)  # noqa: E731
        floor = lambda: np.multiply(fx, 1.5, out=out)  # noqa: E731
    else:
        floor = lambda: np.add(fx, fdy, out=out)  # noqa: E731
        if op == "layer_norm_backward":
            _, m, r = fastln.layer_norm(x, w, b, return_stats=True)
            fl = lambda: fastln.layer_norm_backward(dy, x, m, r, w)  # noqa: E731
        else:
            _, r = fastln.rms_norm(x, w, return_stats=True)
            fl = lambda: fastln.rms_norm_backward(dy, x, r, w)  # noqa: E731
    if torch is None:
        return fl, None, floor
    tdt = getattr(torch, x.dtype.name)
    xt, dyt, wt, bt = (torch.from_numpy(a.astype(np.float32)).to(tdt) for a in (x, dy, w, b))
    if op == "rms_norm":
        return fl, lambda: torch.nn.functional.rms_norm(xt, (n,), wt, 1e-6), floor
    if op == "layer_norm_backward":
        if half:
            _, mt, rt = torch.ops.aten.native_layer_norm(xt, [n], wt, bt, 1e-5)
        else:
            mt, rt = (torch.from_numpy(a).reshape(-1, 1) for a in (m, r))
        return fl, lambda: torch.ops.aten.native_layer_norm_backward(
            dyt, xt, [n], mt, rt, wt, bt, [True, True, True]), floor
    xg, wg = xt.clone().requires_grad_(), wt.clone().requires_grad_()

    def autograd():
        y = torch.nn.functional.rms_norm(xg, (n,), wg, 1e-6)
        return torch.autograd.grad(y, (xg, wg), dyt)

    return fl, autograd, floor


def training_rows(shapes: Sequence[Tuple[int, int]] = SHAPES, rounds: int = 15,
                  ops: Sequence[str] = OPS, dtype: str = "float32") -> List[Dict]:
    """One dict per op and shape (x and dy of dtype, a name in DTYPES): times in ms of fastln,
    torch (None without torch) and the floor, and the ratios speedup = torch / fastln,
    fastln / floor, torch / floor. Runs fastln and torch on one thread; afterwards fastln follows
    OpenMP again (set_num_threads(0))."""
    dt = _bench.parse_dtype(dtype)
    try:
        import torch
    except ImportError:
        torch = None
    fastln.set_num_threads(1)
    torch_threads = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(1)
    rows = []
    try:
        rng = np.random.default_rng(0)
        for shape in shapes:
            x, dy = (rng.standard_normal(shape, dtype=np.float32).astype(dt) for _ in range(2))
            w, b = (rng.standard_normal(shape[-1], dtype=np.float32) for _ in range(2))
            for op in ops:
                t_fl, t_torch, t_floor = _best(_cases(op, x, dy, w, b, torch), rounds)
                assert t_fl is not None and t_floor is not None
                rows.append({
                    "op": op, "shape": tuple(shape), "fastln_ms": 1e3 * t_fl,
                    "torch_ms": None if t_torch is None else 1e3 * t_torch,
                    "floor_ms": 1e3 * t_floor,
                    "speedup": None if t_torch is None else t_torch / t_fl,
                    "fastln_floor": t_fl / t_floor,
                    "torch_floor": None if t_torch is None else t_torch / t_floor,
                })
    finally:
        fastln.set_num_threads(0)
        if torch is not None:
            torch.set_num_threads(torch_threads)
    return rows


def _us(ms: Optional[float]) -> Optional[float]:
    return None if ms is None else 1e3 * ms


def _fmt(v: Optional[float], spec: str) -> str:
    return "-" if v is None else format(v, spec)


def markdown(rows: List[Dict]) -> str:
    lines = ["| op | shape | fastln µs | torch µs | floor µs | torch / fastln | fastln / floor "
             "| torch / floor |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(
            f"| {r['op']} | {r['shape'][0]}x{r['shape'][1]} | {_us(r['fastln_ms']):.2f} "
            f"| {_fmt(_us(r['torch_ms']), '.2f')} | {_us(r['floor_ms']):.2f} "
            f"| {_fmt(r['speedup'], '.2f')}x "
            f"| {r['fastln_floor']:.2f} | {_fmt(r['torch_floor'], '.2f')} |")
    for op in dict.fromkeys(r["op"] for r in rows):
        s = [r["speedup"] for r in rows if r["op"] == op and r["speedup"]]
        if s:
            gm = math.exp(sum(map(math.log, s)) / len(s))
            lines.append(f"\n{op}: geometric mean speedup over torch {gm:.2f}x")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="fastln training ops against torch and the floor")
    ap.add_argument("--quick", action="store_true", help="the quick grid, few rounds")
    ap.add_argument("--grid", action="store_true",
                    help="the N×D grid of python -m fastln.bench (inputs up to 64 MiB)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--dtype", choices=DTYPES, default="float32",
                    help="of x, dy and the outputs (bfloat16 needs ml_dtypes)")
    args = ap.parse_args(argv)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.grid:
        shapes = tuple(_bench.grid(64 << 20))
    rounds = args.rounds or (3 if args.quick else 15)
    print(f"fastln {fastln.__version__}, isa {fastln.get_isa()}, 1 thread, {args.dtype}, "
          f"best of {rounds} interleaved rounds")
    print(markdown(training_rows(shapes, rounds, dtype=args.dtype)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
