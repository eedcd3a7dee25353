"""The runnable examples, in their quick modes (skipped without the [examples] extras)."""

import importlib.util
import pathlib

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_paper_batch_size_quick(tmp_path, capsys):
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    mod = _load("paper_batch_size")
    png = tmp_path / "curves.png"
    assert mod.main(["--quick", "--epochs", "2", "--out", str(png)]) == 0
    out = capsys.readouterr().out
    assert png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # One row per normalization, and the gradient check ran.
    for row in ("| none |", "| batch norm |", "| layer norm |", "gradient check"):
        assert row in out
    assert "n/a" in out  # batch norm does not run at batch size 1


def test_paper_batch_size_gradient_check_catches_a_wrong_backward(monkeypatch):
    pytest.importorskip("sklearn")
    import numpy as np

    mod = _load("paper_batch_size")
    right = mod.gradient_check(np.random.default_rng(0), per_param=2)
    assert max(right.values()) < 1e-5
    monkeypatch.setattr(mod.LayerNorm, "backward", lambda self, dy: (
        setattr(self, "grads", [np.zeros_like(p) for p in self.params]) or dy))
    wrong = mod.gradient_check(np.random.default_rng(0), per_param=2)
    assert wrong["layer norm"] > 1e-2
