"""Runs the C++ test program of tests/native (no Python in it) through tests/native/run.sh.

The native run builds with the host compiler; the aarch64 run cross-compiles and runs under
qemu-aarch64. Each takes minutes, most of it compiling the kernel files. The aarch64 run is marked
slow and skips when the cross tools are absent (run.sh would install them, which a test should not
do: .ci/run installs them first with `bash tests/native/run.sh --aarch64-tools`).
"""

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_SH = os.path.join(ROOT, "tests", "native", "run.sh")

pytestmark = pytest.mark.skipif(
    not os.path.exists(RUN_SH) or shutil.which("bash") is None, reason="needs the source tree and bash"
)


def _run(args, tmp_path, **env):
    r = subprocess.run(
        ["bash", RUN_SH, *args],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "FASTLN_NATIVE_BUILD_DIR": str(tmp_path), **env},
    )
    out = r.stdout + r.stderr
    m = re.search(r"^(\d+) passed, (\d+) failed$", r.stdout, re.MULTILINE)
    assert r.returncode == 0 and m, out
    assert int(m.group(1)) > 100 and m.group(2) == "0", out
    return r.stdout


@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None, reason="needs a C++ compiler")
def test_native_kernels(tmp_path):
    out = _run([], tmp_path)
    assert re.search(r"^scalar: ok$", out, re.MULTILINE), out
    # Again with every one-thread layer norm in rows of 2 to 4 KiB in the phased loop (on most CPUs
    # only calls of 32 MiB or more, or none, take it), so that its rows are checked against the
    # guard rows and padding of this program too.
    r = subprocess.run([str(tmp_path / "test_kernels")], capture_output=True, text=True,
                       env={**os.environ, "FASTLN_PHASED_MIB": "0"})
    m = re.search(r"^(\d+) passed, (\d+) failed$", r.stdout, re.MULTILINE)
    assert r.returncode == 0 and m and m.group(2) == "0", r.stdout + r.stderr
    if os.uname().machine == "x86_64":
        # avx2 is compiled into every x86-64 build; it runs where the CPU has it.
        assert re.search(r"^avx2: (ok|compiled, but this CPU cannot run it: skipped)$", out, re.MULTILINE), out
        assert re.search(r"^avx512: (ok|compiled, but this CPU cannot run it: skipped)$", out, re.MULTILINE), out


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64") is None,
    reason="needs g++-aarch64-linux-gnu and qemu-user (bash tests/native/run.sh --aarch64 installs them)",
)
def test_native_kernels_aarch64_under_qemu(tmp_path):
    out = _run(["--aarch64"], tmp_path)
    assert re.search(r"^fastln native tests: aarch64", out, re.MULTILINE), out
    assert re.search(r"^neon: ok$", out, re.MULTILINE), out
