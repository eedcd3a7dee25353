"""Speed of fastln.layer_norm against the floor and its peers: ``python -m fastln.bench``.

The floor is ``np.multiply(x, c, out=y)``: one streaming pass that reads x and writes y, which a
layer norm cannot beat. For float16 and bfloat16 (ml_dtypes), whose NumPy arithmetic is scalar
code far below memory speed, the floor is a copy, ``np.copyto(y, x)``: the same bytes. Every
implementation runs on the same arrays, interleaved round by round, and keeps its best round, so
that the ratios hold on a noisy, shared machine.

Implementations (each skipped with a note when its package is missing):

  fastln        fastln.layer_norm
  floor         np.multiply(x, 1.5, out=y); for 16-bit dtypes np.copyto(y, x); in both modes
  numpy         fastln._reference.layer_norm: the float64 NumPy reference (two passes)
  torch         torch.nn.functional.layer_norm on torch.from_numpy(x) (no copy), in
                torch.inference_mode() entered once a batch of calls, outside the clock
  onnxruntime   an ONNX LayerNormalization (opset 17) model built with the onnx package
  fastln_1t     fastln on one thread, next to fastln on --threads N > 1: the column
                "× 1 thread" is fastln's speedup from the threads

All get weight and bias (gamma, beta) of shape (D,) in x's dtype; eps = 1e-5. A peer without a
kernel for a dtype (onnxruntime's CPU provider has no bfloat16 LayerNormalization) is left out of
that dtype's rows, with a note. "out" mode hands fastln a preallocated output and binds one for
onnxruntime (torch has no out= here, so it allocates in both modes); "alloc" mode lets every
implementation but the floor allocate its result. The floor is always the pass into a preallocated
y, as defined above, so that "/ floor" measures an allocating call against the same hardware bound
(an allocating np.multiply pays page faults on a fresh output, 528 a call at 8192x1024 float32
on the Zen 4 EPYC guest, 2026-12-07, which fastln's output cache avoids). It runs on one thread: with --threads N > 1, "/ floor" compares N threads
against one thread's pass.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import fastln
from fastln import _reference

PEERS = ("numpy", "torch", "onnxruntime")
IMPLS = ("fastln", "floor") + PEERS

# The grid of the benchmark suite (bench/): N rows of D values.
GRID_N = (1, 8, 128, 2048, 8192, 32768)
GRID_D = (64, 768, 1024, 4096, 16384)
MAX_BYTES = 512 << 20  # skip shapes whose input is larger than this

# --quick: a few shapes that span the regimes (call overhead, L1/L2-resident, streaming from
# memory, short rows, long rows).
QUICK_SHAPES = ((1, 768), (128, 768), (2048, 768), (512, 4096), (32768, 1024), (8, 16384), (8192, 64))

EPS = 1e-5


def grid(max_bytes: int = MAX_BYTES, itemsize: int = 4) -> List[Tuple[int, int]]:
    return [(n, d) for n in GRID_N for d in GRID_D if n * d * itemsize <= max_bytes]


# ---- the implementations -------------------------------------------------------------------------

def _have(module: str) -> Optional[str]:
    """None when `module` imports, else a note saying why it is skipped."""
    try:
        __import__(module)
    except Exception as e:  # noqa: BLE001 (ImportError, or a broken install)
        return f"{module} skipped: {type(e).__name__}: {e}"
    return None


def _onnx_session(d: int, dtype: np.dtype, threads: int):
    import onnxruntime as ort
    from onnx import TensorProto, helper

    et = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
          "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}[np.dtype(dtype).name]
    node = helper.make_node("LayerNormalization", ["X", "W", "B"], ["Y"], axis=-1, epsilon=EPS)
    graph = helper.make_graph(
        [node],
        "ln",
        [
            helper.make_tensor_value_info("X", et, ["N", d]),
            helper.make_tensor_value_info("W", et, [d]),
            helper.make_tensor_value_info("B", et, [d]),
        ],
        [helper.make_tensor_value_info("Y", et, ["N", d])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 9)  # what current onnxruntime releases accept
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


DTYPES = ("float32", "float64", "float16", "bfloat16")


def parse_dtype(name: str) -> np.dtype:
    """One of DTYPES; bfloat16 is ml_dtypes' (ImportError without it)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}")
    return np.dtype(name)


def parse_shapes(text: str) -> List[Tuple[int, int]]:
    """"1x768,2048x768" as [(1, 768), (2048, 768)]; ValueError naming the bad entry."""
    shapes = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        try:
            n, d = (int(v) for v in parts)
        except ValueError:
            raise ValueError(f"{item!r} is not NxD (two integers, e.g. 2048x768)") from None
        if n < 1 or d < 1:
            raise ValueError(f"{item!r}: N and D must be >= 1")
        shapes.append((n, d))
    return shapes


def _is_16bit(dtype: np.dtype) -> bool:
    return np.dtype(dtype).itemsize == 2


class Unsupported(Exception):
    """A peer that has no kernel for this dtype."""


def _torch_tensor(a: np.ndarray):
    import torch

    if np.dtype(a.dtype).name == "bfloat16":  # torch.from_numpy knows no ml_dtypes: share the bits
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def make_impl(name: str, x: np.ndarray, w: np.ndarray, b: np.ndarray, out: bool,
              threads: int) -> Callable[[], object]:
    """A no-argument callable that runs implementation `name` once on x (raises ImportError, or
    Unsupported when the peer has no kernel for x's dtype)."""
    y = np.empty_like(x)
    if name == "fastln":
        ln = fastln.layer_norm
        if out:
            return lambda: ln(x, w, b, EPS, out=y)
        return lambda: ln(x, w, b, EPS)
    if name == "fastln_1t":
        # One thread for a whole batch of calls (enter/leave, outside the timed span): set and
        # reset around each call, the two settings took about 1 us, which at 1x768 (0.4 us a
        # call) made the "x 1 thread" column read 2.96 where the threads gave nothing (0.98).
        ln = fastln.layer_norm
        one_thread = (lambda: ln(x, w, b, EPS, out=y)) if out else (lambda: ln(x, w, b, EPS))
        return _Batched(one_thread, lambda: fastln.set_num_threads(1),
                        lambda: fastln.set_num_threads(threads))
    if name == "floor":  # the pass into y whatever the mode (see the module's docstring)
        if _is_16bit(x.dtype):
            copyto = np.copyto
            return lambda: copyto(y, x)
        mul = np.multiply
        return lambda: mul(x, 1.5, out=y)
    if name == "numpy":
        ref = _reference.layer_norm
        return lambda: ref(x, w, b, EPS)
    if name == "torch":
        import torch

        torch.set_num_threads(threads)
        f = torch.nn.functional.layer_norm
        xt, wt, bt = _torch_tensor(x), _torch_tensor(w), _torch_tensor(b)
        shape = (x.shape[-1],)

        # Inference mode (no autograd bookkeeping) held for a whole batch: entered around each call
        # it cost 1.8 us a call at 1x768 (4.64 against 2.85 us, the Zen 4 EPYC guest, 2026-12-07).
        mode = torch.inference_mode()
        return _Batched(lambda: f(xt, shape, wt, bt, EPS), mode.__enter__,
                        lambda: mode.__exit__(None, None, None))
    if name == "onnxruntime":
        import onnxruntime as ort

        if not _is_16bit(x.dtype):
            sess = _onnx_session(x.shape[-1], x.dtype, threads)
        else:
            # A 16-bit kernel may be missing (NOT_IMPLEMENTED, or a type it cannot map): that
            # drops the peer from these rows. A float32/float64 failure stays an error.
            try:
                sess = _onnx_session(x.shape[-1], x.dtype, threads)
                sess.run(None, {"X": x[:1], "W": w, "B": b})
            except Exception as e:  # noqa: BLE001
                raise Unsupported(f"onnxruntime has no {x.dtype.name} LayerNormalization here "
                                  f"({type(e).__name__})") from None
        if not out:
            feeds = {"X": x, "W": w, "B": b}
            return lambda: sess.run(None, feeds)
        io = sess.io_binding()
        io.bind_cpu_input("X", x)
        io.bind_cpu_input("W", w)
        io.bind_cpu_input("B", b)
        yv = ort.OrtValue.ortvalue_from_numpy(y)
        io.bind_ortvalue_output("Y", yv)
        return lambda: sess.run_with_iobinding(io)
    raise ValueError(f"unknown implementation {name!r}")


def available(names: Sequence[str]) -> Tuple[List[str], List[str]]:
    """(names that can run here, notes for those that cannot)."""
    need = {"torch": ["torch"], "onnxruntime": ["onnx", "onnxruntime"]}
    ok, notes = [], []
    for n in names:
        missing = [m for m in (_have(mod) for mod in need.get(n, [])) if m]
        if missing:
            notes += missing
        else:
            ok.append(n)
    return ok, notes


def inputs(n: int, d: int, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d), dtype=np.float64).astype(dtype)
    w = (1.0 + 0.1 * rng.standard_normal(d)).astype(dtype)
    b = (0.1 * rng.standard_normal(d)).astype(dtype)
    return x, w, b


# ---- timing --------------------------------------------------------------------------------------

class _Batched:
    """A call with a setting that holds for a whole batch of calls: enter() before the batch's
    clock starts, leave() after it stops."""

    def __init__(self, fn: Callable[[], object], enter: Callable[[], object],
                 leave: Callable[[], object]) -> None:
        self.fn, self.enter, self.leave = fn, enter, leave

    def __call__(self):
        self.enter()
        try:
            return self.fn()
        finally:
            self.leave()


def _batch(fn: Callable[[], object], number: int, clock) -> float:
    """Seconds for `number` calls of fn (of a _Batched's inner call, with its setting held)."""
    inner = fn.fn if isinstance(fn, _Batched) else fn
    if isinstance(fn, _Batched):
        fn.enter()
    try:
        t0 = clock()
        for _ in range(number):
            inner()
        return clock() - t0
    finally:
        if isinstance(fn, _Batched):
            fn.leave()


def _calibrate(fn: Callable[[], object], target: float, clock) -> Tuple[int, float]:
    """(calls per round so that a round lasts about `target` seconds, seconds per call seen)."""
    fn()  # warm up: first-touch page faults, lazy initialization
    number = 1
    while True:
        dt = _batch(fn, number, clock)
        if dt >= target / 4 or number >= 1 << 20:
            return max(1, int(number * target / max(dt, 1e-9))), dt / number
        number *= 4


def time_interleaved(fns: Dict[str, Callable[[], object]], rounds: int,
                     round_time: float, clock=time.perf_counter) -> Dict[str, float]:
    """Best seconds per call of each fn; the fns take turns, one round each, `rounds` times. The
    calibration's batches, each fn's alone, are not rounds: only interleaved rounds count."""
    numbers, per_call = {}, {}
    for k, f in fns.items():
        numbers[k], per_call[k] = _calibrate(f, round_time, clock)
    # A fn whose single call outlasts a round (big shapes; the float64 reference) takes part in as
    # many rounds as fit in ten times what the rounds of the others take (10 * rounds *
    # round_time): its noise is small next to its own time.
    budget = 10 * round_time * rounds
    quota = {k: min(rounds, max(1, int(budget / per_call[k]))) for k in fns}
    best = {k: math.inf for k in fns}
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for i in range(rounds):
            for k, f in fns.items():
                if i >= quota[k]:
                    continue
                number = numbers[k]
                best[k] = min(best[k], _batch(f, number, clock) / number)
    finally:
        if gc_was:
            gc.enable()
    return best


# ---- the report ----------------------------------------------------------------------------------

def _wake_threads(seconds: float = 0.5) -> None:
    """Keep fastln's thread team busy for a while before the first shape is timed. On the EPYC
    guest the first shape of 11 of 13 `--threads 2` runs ran no faster than on one thread
    (0.50-1.01x; 128x1024 36-45 us, against 13.7-13.8 us when it came second), and a loop of calls
    took 42 us on its first 20 ms and 14 us from 0.3 s on, as if the second core woke slowly."""
    x = np.ones((256, 1024), np.float32)
    y = np.empty_like(x)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        fastln.layer_norm(x, out=y)


def run(shapes, dtypes, modes, threads: int, names, rounds: int, round_time: float,
        log=print, sweeps: int = 1) -> List[dict]:
    """Each shape's row; with sweeps > 1 the whole set is measured that many times over and each
    implementation keeps its best time of all sweeps, so that each shape's rounds are spread over
    the run instead of lying within seconds of each other: on a shared machine the other tenants'
    load comes and goes over minutes, and one sweep can fall wholly inside a busy spell."""
    fastln.set_num_threads(threads)
    if threads != 1:
        _wake_threads()
    rows: Dict[tuple, dict] = {}
    for sweep in range(sweeps):
        last = sweep == sweeps - 1
        for dt in dtypes:
            skip = set()
            for n, d in shapes:
                x, w, b = inputs(n, d, dt)
                for mode in modes:
                    fns = {}
                    for k in names:
                        if k in skip:
                            continue
                        try:
                            fns[k] = make_impl(k, x, w, b, mode == "out", threads)
                        except Unsupported as e:
                            skip.add(k)
                            if sweep == 0:
                                log(f"note: {e}")
                    t = time_interleaved(fns, rounds, round_time)
                    key = (np.dtype(dt).name, n, d, mode)
                    row = rows.setdefault(key, {"n": n, "d": d, "dtype": key[0], "mode": mode,
                                                "threads": threads, "us": {}})
                    for k, v in t.items():
                        row["us"][k] = min(row["us"].get(k, math.inf), v * 1e6)
                    if last:
                        log(format_row(row))
                    del fns
                del x, w, b
    fastln.set_num_threads(0)
    return list(rows.values())


def _bytes(row) -> int:
    return 2 * row["n"] * row["d"] * parse_dtype(row["dtype"]).itemsize


HEADER = ("| dtype | mode | N×D | fastln µs | GB/s | / floor | floor µs | "
          "× numpy | × torch | × onnxruntime |")
RULE = "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"


def format_row(row) -> str:
    us = row["us"]
    f = us["fastln"]
    gbs = _bytes(row) / (f * 1e-6) / 1e9

    def cell(k):
        return f"{us[k] / f:.2f}" if k in us else "–"

    floor = us.get("floor")
    scaling = f" {cell('fastln_1t')} |" if row["threads"] > 1 else ""
    return (f"| {row['dtype']} | {row['mode']} | {row['n']}×{row['d']} | {f:.2f} | {gbs:.1f} | "
            f"{f / floor:.2f} | {floor:.2f} | {cell('numpy')} | {cell('torch')} | "
            f"{cell('onnxruntime')} |" + scaling) if floor else (
            f"| {row['dtype']} | {row['mode']} | {row['n']}×{row['d']} | {f:.2f} | {gbs:.1f} | – | – | "
            f"{cell('numpy')} | {cell('torch')} | {cell('onnxruntime')} |" + scaling)


def summary(results: List[dict]) -> List[str]:
    """Geometric-mean speedups over each peer, per dtype and mode."""
    lines = []
    keys = sorted({(r["dtype"], r["mode"]) for r in results})
    for dt, mode in keys:
        rows = [r for r in results if r["dtype"] == dt and r["mode"] == mode]
        parts = []
        for k in ("floor",) + PEERS + ("fastln_1t",):
            ratios = [r["us"][k] / r["us"]["fastln"] for r in rows if k in r["us"]]
            if not ratios:
                continue
            g = math.exp(sum(map(math.log, ratios)) / len(ratios))
            if k == "floor":
                parts.append(f"time/floor geomean {1 / g:.2f} (worst {1 / min(ratios):.2f})")
            elif k == "fastln_1t":
                parts.append(f"× 1 thread geomean {g:.2f} (worst {min(ratios):.2f})")
            else:
                parts.append(f"× {k} geomean {g:.2f} (worst {min(ratios):.2f})")
        if parts:  # fastln alone (--impl fastln) has nothing to compare with
            lines.append(f"{dt} {mode}: " + "; ".join(parts))
    return lines


def ratios(row) -> dict:
    """The printed row's derived figures: GB/s, fastln's time over the floor's, each peer's time
    over fastln's (the × columns)."""
    us = row["us"]
    f = us["fastln"]
    out = {"gbps": _bytes(row) / (f * 1e-6) / 1e9}
    if "floor" in us:
        out["per_floor"] = f / us["floor"]
    out["speedup"] = {k: us[k] / f for k in PEERS + ("fastln_1t",) if k in us}
    return out


def versions() -> dict:
    """Versions of the peers that ran (None: not installed)."""
    out = {"fastln": fastln.__version__, "numpy": np.__version__, "python": platform.python_version()}
    for mod in ("torch", "onnxruntime", "onnx", "ml_dtypes"):
        m = sys.modules.get(mod)
        out[mod] = getattr(m, "__version__", None) if m is not None else None
    return out


def _finite(v):
    """v with every float that is NaN or infinite replaced by None (for strict JSON)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(u) for k, u in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(u) for u in v]
    if isinstance(v, np.generic):
        return _finite(v.item())
    return v


def machine() -> str:
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} CPUs"


def plot(results: List[dict], path: str) -> None:
    """GB/s against D, one panel per N, for the out= results (the allocating ones if none). When no
    N has two values of D (--quick, most --shapes lists), GB/s against the bytes of x instead, one
    panel per dtype."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mode = "out" if any(r["mode"] == "out" for r in results) else "alloc"
    results = [r for r in results if r["mode"] == mode]
    groups = sorted({(r["dtype"], r["n"]) for r in results})
    groups = [g for g in groups if len({r["d"] for r in results if (r["dtype"], r["n"]) == g}) > 1]
    if not groups:
        return _plot_by_size(results, path, mode, plt)
    cols = min(3, len(groups))
    nrows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.6 * cols, 2.7 * nrows), squeeze=False)
    for ax, g in zip(axes.flat, groups):
        rows = sorted((r for r in results if (r["dtype"], r["n"]) == g), key=lambda r: r["d"])
        ds = [r["d"] for r in rows]
        for k in IMPLS:
            if k not in rows[0]["us"]:
                continue
            gbs = [_bytes(r) / (r["us"][k] * 1e-6) / 1e9 for r in rows]
            style = {"color": "k", "ls": "--", "lw": 1.2} if k == "floor" else {"marker": "o", "ms": 3}
            ax.plot(ds, gbs, label=k, **style)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ds, [str(v) for v in ds], fontsize=6, rotation=45)
        ax.minorticks_off()
        ax.tick_params(axis="y", labelsize=6)
        ax.set_title(f"{g[0]}, N = {g[1]}", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[-1, :]:
        ax.set_xlabel("D (row length)", fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel("GB/s (x + y)", fontsize=7)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=6)
    _save(fig, path, "layer norm throughput", mode, results)


def _save(fig, path: str, title: str, mode: str, results: List[dict]) -> None:
    how = "out= given" if mode == "out" else "allocating"
    fig.suptitle(f"{title}, {how}, {results[0]['threads']} thread(s)\n"
                 f"floor = np.multiply(x, c, out=y), a copy for 16-bit; {machine()}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=70)
    print(f"wrote {path}")


def _plot_by_size(results: List[dict], path: str, mode: str, plt) -> None:
    """GB/s against the bytes of x, each point labelled N×D, one panel per dtype."""
    dtypes = sorted({r["dtype"] for r in results})
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6.0 * len(dtypes), 3.6), squeeze=False)
    for ax, dt in zip(axes.flat, dtypes):
        rows = sorted((r for r in results if r["dtype"] == dt), key=lambda r: (_bytes(r), r["n"]))
        sizes = [_bytes(r) / 2 for r in rows]
        for k in IMPLS:
            have = [(s, r) for s, r in zip(sizes, rows) if k in r["us"]]
            if not have:
                continue
            gbs = [_bytes(r) / (r["us"][k] * 1e-6) / 1e9 for _, r in have]
            style = {"color": "k", "ls": "--", "lw": 1.2} if k == "floor" else {"marker": "o", "ms": 3}
            ax.plot([s for s, _ in have], gbs, label=k, **style)
        for s, r in zip(sizes, rows):
            ax.annotate(f"{r['n']}×{r['d']}", (s, _bytes(r) / (r["us"]["fastln"] * 1e-6) / 1e9),
                        fontsize=5, textcoords="offset points", xytext=(2, 3))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes of x", fontsize=7)
        ax.set_ylabel("GB/s (x + y)", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.set_title(dt, fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    _save(fig, path, "layer norm throughput by size", mode, results)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fastln.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a few shapes, short rounds (about 20 s)")
    p.add_argument("--full", action="store_true",
                   help="the whole N×D grid of the bench/ suite (inputs up to 512 MiB); slow")
    p.add_argument("--threads", type=int, default=1, help="threads for fastln, torch, onnxruntime")
    p.add_argument("--dtype", default="float32",
                   help="float32, float64, float16, bfloat16 (ml_dtypes); several: float32,float16")
    p.add_argument("--mode", default="out,alloc", help="out, alloc or out,alloc")
    p.add_argument("--impl", default=",".join(IMPLS), help="implementations to run")
    p.add_argument("--shapes", default=None, help="e.g. 1x768,2048x768 (overrides the grid)")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--sweeps", type=int, default=1,
                   help="measure every shape this many times over, keeping each one's best: on a "
                        "shared machine whose load comes and goes (default 1)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="plot GB/s against D (needs matplotlib)")
    p.add_argument("--training", action="store_true",
                   help="also the backward passes and rms_norm against torch "
                        "(fastln._bench_training: float32, 1 thread, its own shapes; --quick "
                        "takes its short list)")
    p.add_argument("--no-accuracy", action="store_true",
                   help="leave out the accuracy tables (fastln._accuracy) that follow the timings")
    a = p.parse_args(argv)
    if a.threads < 1:
        p.error("--threads must be >= 1")
    if a.sweeps < 1:
        p.error("--sweeps must be >= 1")
    if a.rounds is not None and a.rounds < 1:
        p.error("--rounds must be >= 1")
    if a.quick and a.full:
        p.error("--quick and --full exclude each other")
    shapes = None
    if a.shapes:
        try:
            shapes = parse_shapes(a.shapes)
        except ValueError as e:
            p.error(f"--shapes: {e}")

    try:
        dtypes = [parse_dtype(s) for s in a.dtype.split(",")]
    except (ValueError, ImportError) as e:
        p.error(f"--dtype: {e}")
    modes = a.mode.split(",")
    if not set(modes) <= {"out", "alloc"}:
        p.error("--mode takes out, alloc or both")
    names = [s for s in a.impl.split(",") if s]
    if "fastln" not in names:
        names.insert(0, "fastln")
    unknown = set(names) - set(IMPLS) - {"fastln_1t"}
    if unknown:
        p.error(f"unknown implementations {sorted(unknown)}; known: {', '.join(IMPLS)}")
    names, notes = available(names)
    if a.threads > 1 and "fastln_1t" not in names:
        names.insert(1, "fastln_1t")
    if a.threads == 1 and "fastln_1t" in names:  # it would time fastln itself again
        names.remove("fastln_1t")
        notes.append("fastln_1t left out: with --threads 1 it is fastln")
    if a.plot:  # a path that cannot be written is a bad argument, matplotlib or not
        folder = os.path.dirname(os.path.abspath(a.plot))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            p.error(f"--plot: cannot write into {folder}")
    if a.plot and _have("matplotlib"):
        notes.append(_have("matplotlib") + " (no plot)")
        a.plot = None

    if shapes is None:
        if a.quick:
            shapes = list(QUICK_SHAPES)
        else:
            shapes = grid(MAX_BYTES if a.full else 64 << 20, max(dt.itemsize for dt in dtypes))
    # Many short rounds rather than a few long ones: on a busy machine the best round is then more
    # likely to fall in a quiet moment.
    rounds = a.rounds if a.rounds is not None else (12 if a.quick else 15)
    round_time = 0.002 if a.quick else 0.01

    # A path that cannot be written fails now, not after the timings; "a" keeps an earlier file's
    # results until this run's replace them.
    if a.json:
        try:
            with open(a.json, "a"):
                pass
        except OSError as e:
            p.error(f"--json: {e}")
    # run() sets --threads; the record says what the timings ran with.
    info = dict(fastln.runtime_info(), num_threads=a.threads)
    sb, sb16 = (v / (1 << 20) for v in info["stream_bytes"])
    print(f"fastln {info['version']} isa={info['isa']} threads={a.threads} "
          f"streams y from {sb:g} MiB ({sb16:g} MiB 16-bit; on AMD CPUs later for long rows and "
          f"split calls: help(fastln.set_stream_bytes)); {machine()}; numpy {np.__version__}")
    for note in notes:
        print(f"note: {note}")
    sweeps = f" of {a.sweeps} sweeps" if a.sweeps > 1 else ""
    print(f"µs: best round{sweeps}, per call. GB/s: bytes of x and y over fastln's time. / floor: "
          "fastln time over np.multiply(x, c, out=y) time (a copy for 16-bit dtypes; in both "
          "modes" + ("; on one thread" if a.threads > 1 else "") + "). × peer: peer time over "
          "fastln time.")
    if a.threads > 1:
        print(HEADER + " × 1 thread |")
        print(RULE + " ---: |")
    else:
        print(HEADER)
        print(RULE)
    try:
        results = run(shapes, dtypes, modes, a.threads, names, rounds, round_time,
                      sweeps=a.sweeps)
    except MemoryError as e:
        p.error(f"--shapes: too large for this machine's memory ({e})")
    print()
    for line in summary(results):
        print(line)
    accuracy = None
    if not a.no_accuracy:
        from fastln import _accuracy

        # Rows of 65536 values only in the full report: --quick stays near its 20 s.
        lengths = _accuracy.LENGTHS[:2] if a.quick else _accuracy.LENGTHS
        accuracy = {"float32": _accuracy.measure(lengths=lengths),
                    "float64": _accuracy.measure_float64(),
                    "backward": _accuracy.measure_backward()}
        print("\nAccuracy, float32 rows c + s·N(0,1), 4 a case: max |y - y_ref|, y_ref in float64 "
              "from the same inputs (python -m fastln._accuracy):")
        print(_accuracy.format_table(accuracy["float32"]))
        print("\nfloat64 rows, against each row's exact mean and variance (eps = 1e-12; fastln: "
              "its worst ISA):")
        print(_accuracy.format_table(accuracy["float64"]))
        print("\nlayer_norm_backward's dx and dweight, given the forward pass's mean and rstd, "
              "against the exact gradient: max |g - exact| / max |exact| (eps = 1e-12):")
        print(_accuracy.format_backward_table(accuracy["backward"]))
    if a.json:
        record = {"machine": machine(), "runtime": info, "versions": versions(),
                  "numpy": np.__version__, "sweeps": a.sweeps, "rounds": rounds,
                  "round_time_s": round_time, "quick": a.quick, "full": a.full, "notes": notes,
                  "results": [dict(r, **ratios(r)) for r in results], "accuracy": accuracy}
        with open(a.json, "w") as f:
            # Strict JSON: NaN (a peer's NaN output in the accuracy tables) and Inf become null.
            json.dump(_finite(record), f, indent=1, allow_nan=False)
        print(f"wrote {a.json}")
    if a.plot:
        plot(results, a.plot)
    if a.training:
        from fastln import _bench_training as tb

        print("\nTraining ops, float32, 1 thread (python -m fastln._bench_training):")
        shapes_t = tb.QUICK_SHAPES if a.quick else tb.SHAPES
        print(tb.markdown(tb.training_rows(shapes_t, 5 if a.quick else 15)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
