"""fastln._bench_training runs and reports every op (timings are not checked: the machine is noisy)."""

import pytest

from fastln import _bench_training


def test_training_rows_and_markdown():
    rows = _bench_training.training_rows([(4, 40)], rounds=1)
    assert [r["op"] for r in rows] == list(_bench_training.OPS)
    for r in rows:
        assert r["shape"] == (4, 40) and r["fastln_ms"] > 0 and r["floor_ms"] > 0
    table = _bench_training.markdown(rows)
    assert table.count("\n| ") == len(rows) + 1


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_training_rows_16bit(dtype):
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    rows = _bench_training.training_rows([(4, 40)], rounds=1, dtype=dtype)
    assert [r["op"] for r in rows] == list(_bench_training.OPS)
    assert all(r["fastln_ms"] > 0 and r["floor_ms"] > 0 for r in rows)
