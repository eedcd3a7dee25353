"""The accuracy half of `python -m fastln.bench`: float32 LayerNorm against a float64 reference.

Rows are x = c + s * N(0, 1). The reference runs in float64 on the same float32 inputs, so what is
measured is each implementation's own error. torch and onnxruntime are measured when installed.
`python -m fastln._accuracy` also prints float64 rows against the exact reference (ROWS_F64).
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
    isas = fastln.runtime_info()["isas"]
    before = fastln.get_isa()
    out = []
    try:
        for c, s in ROWS_F64:
            x = c + s * rng.standard_normal((rows_per_case, cols))
            expected, _ = ref.exact_layer_norm(x, eps)
            res = {"c": c, "s": s, "cols": cols}

            def fast(x):
                ys = []
                for isa in isas:
                    fastln.set_isa(isa)
                    ys.append(fastln.layer_norm(x, eps=eps))
                return max(ys, key=lambda y: np.abs(y - expected).max())

            impls = {"fastln": fast}
            if torch_ln is not None:
                impls["torch"] = lambda x: torch_ln(x, eps)
            if sess is not None:
                impls["onnxruntime"] = lambda x: sess.run(None, {"X": x})[0]
            for name, f in impls.items():
                with np.errstate(all="ignore"):
                    y = f(x)
                    err = float(np.abs(y - expected).max()) if np.isfinite(y).all() else float("nan")
                res[name] = err
            out.append(res)
    finally:
        fastln.set_isa(before)
    return out


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
