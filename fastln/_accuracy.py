"""The accuracy half of `python -m fastln.bench`: float32 LayerNorm against a float64 reference.

Rows are x = c + s * N(0, 1). The reference runs in float64 on the same float32 inputs, so what is
measured is each implementation's own error. torch and onnxruntime are measured when installed.
`python -m fastln._accuracy` also prints float64 rows against the exact reference (ROWS_F64), and
layer_norm_backward's dx and dweight against the exact gradient (ROWS_BACKWARD).
"""

from __future__ import annotations

import numpy as np

import fastln
from fastln import _reference as ref

ROWS = [(0, 1), (1e2, 1), (1e4, 1), (1e6, 1), (-1e6, 1), (1e4, 1e-2), (0, 1e-3), (1e30, 1e28)]
LENGTHS = (64, 768, 65536)
# float64 rows: offsets up to 1e15 standard deviations, where a float64 mean's own rounding shows.
ROWS_F64 = [(0, 1), (1e6, 1), (1e6, 1e-3), (1e4, 1e-6), (1e8, 1e-3), (1e12, 1), (1e15, 1)]


def _torch_ln():
    try:
        import torch
    except ImportError:
        return None

    def run(x, eps):
        return torch.nn.functional.layer_norm(torch.from_numpy(x), (x.shape[-1],), eps=eps).numpy()

    return run


def ort_layer_norm_session(cols: int, dtype=np.float32, eps: float = 1e-5, threads: int = 1):
    """An onnxruntime session computing LayerNormalization over the last axis, or None."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    elem = TensorProto.FLOAT if np.dtype(dtype) == np.float32 else TensorProto.DOUBLE
    w = numpy_helper.from_array(np.ones(cols, dtype), "W")
    b = numpy_helper.from_array(np.zeros(cols, dtype), "B")
    node = helper.make_node("LayerNormalization", ["X", "W", "B"], ["Y"], axis=-1, epsilon=eps)
    graph = helper.make_graph(
        [node],
        "ln",
        [helper.make_tensor_value_info("X", elem, [None, cols])],
        [helper.make_tensor_value_info("Y", elem, [None, cols])],
        initializer=[w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _on_each_isa(f):
    """f() under each ISA usable here, in turn, as a list; the active ISA is restored after."""
    before = fastln.get_isa()
    try:
        out = []
        for isa in fastln.runtime_info()["isas"]:
            fastln.set_isa(isa)
            out.append(f())
        return out
    finally:
        fastln.set_isa(before)


def _worst(errors):
    """The largest error, NaN (not finite) if any is."""
    errors = list(errors)
    return float("nan") if any(e != e for e in errors) else max(errors)


def measure(rows_per_case: int = 4, seed: int = 0, lengths=LENGTHS):
    """List of dicts: c, s, cols and the max abs error of each implementation (nan: not finite)."""
    rng = np.random.default_rng(seed)
    torch_ln = _torch_ln()
    out = []
    for cols in lengths:
        sess = ort_layer_norm_session(cols)
        for c, s in ROWS:
            x = (c + s * rng.standard_normal((rows_per_case, cols))).astype(np.float32)
            expected = ref.layer_norm(x, eps=1e-5)
            res = {"c": c, "s": s, "cols": cols}
            impls = {"fastln": lambda x: fastln.layer_norm(x, eps=1e-5)}
            if torch_ln is not None:
                impls["torch"] = lambda x: torch_ln(x, 1e-5)
            if sess is not None:
                impls["onnxruntime"] = lambda x: sess.run(None, {"X": x})[0]
            for name, f in impls.items():
                with np.errstate(all="ignore"):
                    y = f(x).astype(np.float64)
                    err = float(np.abs(y - expected).max()) if np.isfinite(y).all() else float("nan")
                res[name] = err
            out.append(res)
    return out


def measure_float64(rows_per_case: int = 4, cols: int = 768, eps: float = 1e-12, seed: int = 7):
    """As measure, for float64 rows (ROWS_F64) against the exact reference (a float64 one rounds
    the mean as a float64 kernel does); fastln's figure is the worst over the usable ISAs."""
    rng = np.random.default_rng(seed)
    torch_ln = _torch_ln()
    sess = ort_layer_norm_session(cols, np.float64, eps)
    out = []
    for c, s in ROWS_F64:
        x = c + s * rng.standard_normal((rows_per_case, cols))
        expected, _ = ref.exact_layer_norm(x, eps)
        res = {"c": c, "s": s, "cols": cols}

        def err(y):
            with np.errstate(all="ignore"):
                return float(np.abs(y - expected).max()) if np.isfinite(y).all() else float("nan")

        res["fastln"] = _worst(_on_each_isa(lambda: err(fastln.layer_norm(x, eps=eps))))
        if torch_ln is not None:
            res["torch"] = err(torch_ln(x, eps))
        if sess is not None:
            res["onnxruntime"] = err(sess.run(None, {"X": x})[0])
        out.append(res)
    return out


# layer_norm_backward: rows far from zero, where the mean that the forward pass returns is rounded.
ROWS_BACKWARD = [(np.float32, 0, 1), (np.float32, 1e2, 1), (np.float32, 1e4, 1e-3),
                 (np.float32, 1e6, 1), (np.float64, 0, 1), (np.float64, 1e6, 1),
                 (np.float64, 1e8, 1e-3), (np.float64, 1e12, 1), (np.float64, 1e15, 1)]


def measure_backward(rows_per_case: int = 4, cols: int = 768, eps: float = 1e-12, seed: int = 11):
    """dx and dweight of layer_norm_backward, given the forward pass's mean and rstd, against the
    exact gradient (ref.exact_layer_norm_backward): max |g - exact| / max |exact|. torch: autograd
    through its own layer_norm. fastln's figure is the worst over the usable ISAs."""
    rng = np.random.default_rng(seed)
    try:
        import torch
    except ImportError:
        torch = None
    out = []
    for dt, c, s in ROWS_BACKWARD:
        x = (c + s * rng.standard_normal((rows_per_case, cols))).astype(dt)
        w = (1 + 0.1 * rng.standard_normal(cols)).astype(dt)
        dy = rng.standard_normal((rows_per_case, cols)).astype(dt)
        dx_e, dw_e, _ = ref.exact_layer_norm_backward(dy, x, w, eps)

        def err(g, e):
            g = np.asarray(g, np.float64)
            return float(np.abs(g - e).max() / np.abs(e).max()) if np.isfinite(g).all() \
                else float("nan")

        def fast():
            _, mean, rstd = fastln.layer_norm(x, w, eps=eps, return_stats=True)
            dx, dw, _ = fastln.layer_norm_backward(dy, x, mean, rstd, w)
            return err(dx, dx_e), err(dw, dw_e)

        got = _on_each_isa(fast)
        res = {"dtype": np.dtype(dt).name, "c": c, "s": s, "cols": cols,
               "fastln": (_worst(g[0] for g in got), _worst(g[1] for g in got))}
        if torch is not None:
            xt = torch.tensor(x, requires_grad=True)
            wt = torch.tensor(w, requires_grad=True)
            yt = torch.nn.functional.layer_norm(xt, (cols,), wt, None, eps)
            yt.backward(torch.tensor(dy))
            res["torch"] = (err(xt.grad.numpy(), dx_e), err(wt.grad.numpy(), dw_e))
        out.append(res)
    return out


def format_backward_table(results) -> str:
    names = [n for n in ("fastln", "torch") if n in results[0]]
    head = ("| dtype | row: c + s*N(0,1) | D | " + " | ".join(f"{n} dx" for n in names) + " | "
            + " | ".join(f"{n} dweight" for n in names) + " |")
    lines = [head, "|" + "---|" * (3 + 2 * len(names))]
    for r in results:
        cells = [f"{r[n][k]:.1e}" if r[n][k] == r[n][k] else "NaN/Inf" for k in (0, 1)
                 for n in names]
        lines.append(f"| {r['dtype']} | c={r['c']:g}, s={r['s']:g} | {r['cols']} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_table(results) -> str:
    names = [n for n in ("fastln", "torch", "onnxruntime") if n in results[0]]
    head = "| row: c + s*N(0,1) | D | " + " | ".join(f"{n} max abs err" for n in names) + " |"
    lines = [head, "|" + "---|" * (2 + len(names))]
    for r in results:
        cells = []
        for n in names:
            v = r[n]
            cells.append("NaN/Inf" if v != v else f"{v:.1e}")
        lines.append(f"| c={r['c']:g}, s={r['s']:g} | {r['cols']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print("float32, against a float64 reference:")
    print(format_table(measure()))
    print("\nfloat64, against the exact reference (eps = 1e-12):")
    print(format_table(measure_float64()))
    print("\nlayer_norm_backward, against the exact gradient (eps = 1e-12; max |g - exact| / "
          "max |exact|):")
    print(format_backward_table(measure_backward()))
