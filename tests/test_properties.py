"""The paper's invariances, as property tests: for each example, LN(a*x + b) == LN(x) for a > 0."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fastln

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

rows = st.integers(1, 6)
cols = st.integers(2, 300)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    n=rows,
    d=cols,
    dtype=st.sampled_from([np.float32, np.float64]),
    isa=st.sampled_from(fastln.runtime_info()["isas"]),
)
def test_scale_and_shift_invariance(data, n, d, dtype, isa):
    fastln.set_isa(isa)
    try:
        x = data.draw(
            hnp.arrays(np.float64, (n, d), elements=st.floats(-100, 100, allow_nan=False, width=32))
        )
        # Rows need a spread well above rounding, or the normalized values are noise.
        x = x + np.linspace(0, 1, d)
        a = data.draw(st.floats(1e-3, 1e3))
        b = data.draw(st.floats(-1e4, 1e4))
        xd = x.astype(dtype)
        # A row that is (nearly) constant has no scale to be invariant to (with eps = 0, 0/0).
        spread0 = np.ptp(xd.astype(np.float64), axis=1)
        assume((spread0 > 1e-3 * (np.abs(x).max() + 1)).all())
        yd = (a * x + b).astype(dtype)
        # eps = 0 makes the invariance exact in real arithmetic.
        y1 = fastln.layer_norm(xd, eps=0.0)
        y2 = fastln.layer_norm(yd, eps=0.0)
        # float32 storage of a*x+b rounds each value by ~|b| * 2^-24 relative to the row's spread.
        spread = np.ptp(xd.astype(np.float64), axis=1, keepdims=True) * a
        rounding = (np.abs(b) + np.abs(a * x).max()) * np.finfo(dtype).eps / spread
        # Errors are relative to the output's size, and an outlier makes |y| large (sqrt(d) at most).
        scale = max(1.0, float(np.abs(y1).max()))
        tol = (50 * np.finfo(dtype).eps + 4 * rounding.max() * np.sqrt(d)) * scale
        np.testing.assert_allclose(y1, y2, rtol=0, atol=tol)
        # And each row of y has mean 0 and variance 1.
        np.testing.assert_allclose(y1.astype(np.float64).mean(axis=1), 0, atol=1e3 * np.finfo(dtype).eps)
        np.testing.assert_allclose(y1.astype(np.float64).var(axis=1), 1, atol=1e3 * np.finfo(dtype).eps)
    finally:
        fastln.set_isa(None)
