"""fastln's CUDA kernels against torch's and against a device-to-device copy, on one GPU.

    python bench/gpu_bench.py --out OUTDIR [--quick] [--budget SECONDS]

For each shape (16384 x {1024, 4096, 8192}, 4096 x {768, 16384}), dtype (float32, float16,
bfloat16) and op (layer_norm and rms_norm, forward and backward) it times:
  - fastln (fastln.layer_norm / rms_norm / *_backward on torch CUDA tensors);
  - torch: F.layer_norm, F.rms_norm forward; aten.native_layer_norm_backward, and autograd through
    F.rms_norm for the backward;
  - the floor: a device-to-device copy of x, the faster of torch's copy_ and torch.mul(x, 1, out=),
    in the same process.
Bytes moved: forward reads x and writes y; backward reads x and dy and writes dx (parameters and
statistics are a rounding error at these sizes). Reported: time, GB/s, the fraction of the copy's
GB/s, and the speedup over torch; a correctness check against torch per point. Times are CUDA-event
medians over replays of a CUDA graph of 20 launches (Python's launch overhead left out) that rotate
through enough input copies to miss the 60 MB L2.

Writes OUTDIR/gpu_bench.json and OUTDIR/gpu_bench.md and prints the table. Stops adding points
when --budget seconds have passed (the rest are listed as skipped).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fastln  # noqa: E402
from fastln import _cuda_api  # noqa: E402

SHAPES = [(16384, 1024), (16384, 4096), (16384, 8192), (4096, 768), (4096, 16384)]
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
OPS = ["layer_norm", "rms_norm", "layer_norm_backward", "rms_norm_backward"]
ROTATE_BYTES = 512 << 20  # inputs rotated per batch, several times the L2


def timeit(fns, reps, batches, stream):
    """(median seconds per call, 'graph' or 'eager'): `reps` calls, fns[i % len], captured in one
    CUDA graph on `stream` and replayed `batches` times, so that Python's launch overhead stays out
    of the kernel times; launched eagerly if capture fails."""
    with torch.cuda.stream(stream):
        for f in fns:
            f()
    stream.synchronize()
    run, mode = None, "graph"
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            for i in range(reps):
                fns[i % len(fns)]()
        run = g.replay
        with torch.cuda.stream(stream):
            run()
    except Exception as e:  # noqa: BLE001 (any capture failure means: time it eagerly)
        print(f"  (graph capture failed: {type(e).__name__}: {e}; timing eagerly)", flush=True)
        torch.cuda.synchronize()
        mode = "eager"

        def run():
            for i in range(reps):
                fns[i % len(fns)]()
    times = []
    with torch.cuda.stream(stream):
        for _ in range(batches):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / reps)
    return statistics.median(times), mode


def make_point(op, rows, cols, dt, copies):
    """(fastln callables, torch callables, copy callables, bytes moved, check())."""
    g = torch.Generator(device="cuda").manual_seed(rows * 31 + cols)
    xs = [torch.randn(rows, cols, device="cuda", generator=g).to(dt) for _ in range(copies)]
    w = torch.randn(cols, device="cuda", generator=g)
    b = torch.randn(cols, device="cuda", generator=g)
    wt, bt = w.to(dt), b.to(dt)  # torch's kernels want parameters in x's dtype
    outs = [torch.empty_like(x) for x in xs]
    nbytes = xs[0].numel() * xs[0].element_size()
    # torch's copy_ and clone fall to about 2.7 TB/s from 512 MiB up on an H200 (2026-12-04), where
    # an elementwise kernel still streams 4.2 TB/s: the floor is the faster of the two passes.
    copy = ([lambda x=x, o=o: o.copy_(x) for x, o in zip(xs, outs)],
            [lambda x=x, o=o: torch.mul(x, 1.0, out=o) for x, o in zip(xs, outs)])
    rms = op.startswith("rms")
    if not op.endswith("backward"):
        if rms:
            ours = [lambda x=x: fastln_rms(x, w) for x in xs]
            theirs = [lambda x=x: F.rms_norm(x, (cols,), wt, 1e-6) for x in xs]
        else:
            ours = [lambda x=x: fastln.layer_norm(x, w, b) for x in xs]
            theirs = [lambda x=x: F.layer_norm(x, (cols,), wt, bt, 1e-5) for x in xs]

        def check():
            got = ours[0]().float()
            want = theirs[0]().float()
            return float((got - want).abs().max())

        return ours, theirs, copy, 2 * nbytes, check

    dys = [torch.randn(rows, cols, device="cuda", generator=g).to(dt) for _ in range(copies)]
    if rms:
        stats = [_cuda_api.rms_norm(x, w, return_stats=True)[1] for x in xs]
        ours = [lambda x=x, dy=dy, s=s: _cuda_api.rms_norm_backward(dy, x, s, w)
                for x, dy, s in zip(xs, dys, stats)]
        graphs = []
        for x, dy in zip(xs, dys):
            xr = x.detach().requires_grad_(True)
            wr = wt.detach().requires_grad_(True)
            y = F.rms_norm(xr, (cols,), wr, 1e-6)
            graphs.append((y, xr, wr, dy))
        theirs = [lambda gr=gr: torch.autograd.grad(gr[0], (gr[1], gr[2]), gr[3],
                                                    retain_graph=True) for gr in graphs]

        def check():
            got = ours[0]()[0].float()
            want = theirs[0]()[0].float()
            return float((got - want).abs().max() / (want.abs().max() + 1e-30))
    else:
        stats = [_cuda_api.layer_norm(x, w, b, return_stats=True)[1:] for x in xs]
        ours = [lambda x=x, dy=dy, s=s: _cuda_api.layer_norm_backward(dy, x, s[0], s[1], w)
                for x, dy, s in zip(xs, dys, stats)]
        tstats = [torch.ops.aten.native_layer_norm(x, (cols,), wt, bt, 1e-5)[1:] for x in xs]
        theirs = [lambda x=x, dy=dy, s=s: torch.ops.aten.native_layer_norm_backward(
            dy, x, (cols,), s[0], s[1], wt, bt, (True, True, True)) for x, dy, s in
            zip(xs, dys, tstats)]

        def check():
            got = ours[0]()[0].float()
            want = theirs[0]()[0].float()
            return float((got - want).abs().max() / (want.abs().max() + 1e-30))

    return ours, theirs, copy, 3 * nbytes, check


def fastln_rms(x, w):
    return _cuda_api.rms_norm(x, w)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/out")
    ap.add_argument("--quick", action="store_true", help="two shapes, few repetitions")
    ap.add_argument("--budget", type=float, default=300.0, help="seconds before points are skipped")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    info = fastln.runtime_info()
    props = torch.cuda.get_device_properties(0)
    meta = {
        "device": props.name,
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "fastln": info["version"],
        "fastln_cuda": info["cuda"],
    }
    print(json.dumps(meta), flush=True)
    if not info["cuda"]["available"]:
        raise SystemExit(f"fastln's CUDA path is unavailable: {info['cuda']['detail']}")
    shapes = SHAPES[:1] + SHAPES[3:4] if args.quick else SHAPES
    reps, batches = (5, 3) if args.quick else (20, 7)

    stream = torch.cuda.Stream()
    results, skipped = [], []
    for rows, cols in shapes:
        for dname, dt in DTYPES.items():
            for op in OPS:
                key = {"op": op, "rows": rows, "cols": cols, "dtype": dname}
                if time.time() - t0 > args.budget:
                    skipped.append(key)
                    continue
                size = rows * cols * torch.tensor([], dtype=dt).element_size()
                copies = max(1, min(16, math.ceil(ROTATE_BYTES / size / (3 if "back" in op else 2))))
                with torch.cuda.stream(stream):  # autograd's backward then runs there too
                    ours, theirs, copy, nbytes, check = make_point(op, rows, cols, dt, copies)
                    err = check()
                t_copy = min(timeit(c, reps, batches, stream)[0] for c in copy)
                t_ours, m_ours = timeit(ours, reps, batches, stream)
                t_theirs, m_theirs = timeit(theirs, reps, batches, stream)
                t_copy = min([t_copy] + [timeit(c, reps, batches, stream)[0] for c in copy])
                copy_bw = 2 * size / t_copy
                r = dict(key, fastln_us=t_ours * 1e6, torch_us=t_theirs * 1e6, copy_us=t_copy * 1e6,
                         fastln_gbs=nbytes / t_ours / 1e9, torch_gbs=nbytes / t_theirs / 1e9,
                         copy_gbs=copy_bw / 1e9, frac_of_copy=(nbytes / t_ours) / copy_bw,
                         speedup_vs_torch=t_theirs / t_ours, max_err_vs_torch=err,
                         timing=f"{m_ours}/{m_theirs}")
                results.append(r)
                print(f"{op:20s} {rows:5d}x{cols:<5d} {dname:8s} fastln {r['fastln_us']:8.1f} us "
                      f"{r['fastln_gbs']:6.0f} GB/s ({r['frac_of_copy']:.0%} of copy)  torch "
                      f"{r['torch_us']:8.1f} us  x{r['speedup_vs_torch']:.2f}  err {err:.1e}",
                      flush=True)
                del ours, theirs, copy, check
                torch.cuda.empty_cache()

    def geo(vals):
        return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")

    summary = {}
    for group, pred in (("forward", lambda r: not r["op"].endswith("backward")),
                        ("backward", lambda r: r["op"].endswith("backward"))):
        sel = [r for r in results if pred(r)]
        summary[group] = {
            "points": len(sel),
            "geomean_speedup_vs_torch": geo([r["speedup_vs_torch"] for r in sel]),
            "min_frac_of_copy": min((r["frac_of_copy"] for r in sel), default=float("nan")),
            "geomean_frac_of_copy": geo([r["frac_of_copy"] for r in sel]),
        }
    summary["all"] = {"geomean_speedup_vs_torch": geo([r["speedup_vs_torch"] for r in results])}
    doc = {"meta": meta, "results": results, "skipped": skipped, "summary": summary,
           "seconds": time.time() - t0}
    with open(os.path.join(args.out, "gpu_bench.json"), "w") as f:
        json.dump(doc, f, indent=1)

    lines = [f"# fastln CUDA vs torch on {meta['device']} (torch {meta['torch']})", "",
             "| op | shape | dtype | fastln us | GB/s | % of copy | torch us | speedup | err |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        lines.append(f"| {r['op']} | {r['rows']}x{r['cols']} | {r['dtype']} | {r['fastln_us']:.1f} "
                     f"| {r['fastln_gbs']:.0f} | {r['frac_of_copy']:.0%} | {r['torch_us']:.1f} | "
                     f"{r['speedup_vs_torch']:.2f} | {r['max_err_vs_torch']:.1e} |")
    lines.append("")
    for k, v in summary.items():
        lines.append(f"- {k}: " + ", ".join(f"{a} {b:.3g}" if isinstance(b, float) else f"{a} {b}"
                                             for a, b in v.items()))
    if skipped:
        lines.append(f"- skipped for time: {len(skipped)} points")
    table = "\n".join(lines)
    with open(os.path.join(args.out, "gpu_bench.md"), "w") as f:
        f.write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
