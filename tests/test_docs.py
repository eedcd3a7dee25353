"""The examples in the docstrings run and print what they say."""

import doctest

import fastln
import fastln._reference
import fastln._training


def test_docstring_examples():
    for mod in (fastln, fastln._reference, fastln._training):
        failed, attempted = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert failed == 0
    assert doctest.testmod(fastln)[1] >= 4  # the examples are really there


def test_type_annotations_accepted_by_mypy(tmp_path):
    import os
    import subprocess
    import sys

    import pytest

    pytest.importorskip("mypy")
    src = tmp_path / "use.py"
    src.write_text(
        "import numpy as np\nimport fastln\n"
        "y: np.ndarray = fastln.layer_norm(np.zeros((2, 3), np.float32), eps=1e-5)\n"
        "ln = fastln.LayerNorm(3)\ninfo: dict = fastln.runtime_info()\n"
    )
    # Point mypy at the fastln under test (an installed one it finds by itself; mypy refuses
    # site-packages in MYPYPATH), and let it fail if it cannot find it.
    env = dict(os.environ)
    top = os.path.dirname(os.path.dirname(os.path.abspath(fastln.__file__)))
    if os.path.basename(top) not in ("site-packages", "dist-packages"):
        env["MYPYPATH"] = top
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", str(src)],
        capture_output=True, text=True, cwd=tmp_path, env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout
