"""The C library without Python: CMake builds libfastln, a C program links it, and its results match
a float64 NumPy reference; bad arguments come back as status codes.

Builds once per session into a temporary folder (minutes: 371 s on the 2-core EPYC guest, most of
it compiling the kernel files). Skips without cmake or a C compiler, or when the sources are not there (an
installed wheel without the checkout).
"""

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CMAKE = shutil.which("cmake")
CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the build below is for Linux"),
    pytest.mark.skipif(CMAKE is None or CC is None, reason="needs cmake and a C compiler"),
    pytest.mark.skipif(
        not os.path.exists(os.path.join(ROOT, "CMakeLists.txt")), reason="needs the source tree"
    ),
]


def _exec(cmd, **kw):
    return subprocess.run(cmd, check=False, capture_output=True, text=True, **kw)


def _run(cmd, **kw):
    r = _exec(cmd, **kw)
    assert r.returncode == 0, f"{cmd} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    """Builds and installs libfastln with CMake; returns the install prefix."""
    tmp = tmp_path_factory.mktemp("cmake")
    build, prefix = tmp / "build", tmp / "prefix"
    _run([CMAKE, "-S", ROOT, "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"])
    _run([CMAKE, "--build", str(build), "-j", "2"])
    _run([CMAKE, "--install", str(build), "--prefix", str(prefix)])
    return prefix


def _libdir(prefix):
    for d in ("lib", "lib64"):
        if (prefix / d / "libfastln.a").exists():
            return prefix / d
    raise AssertionError(f"libfastln.a not installed under {prefix}")


@pytest.fixture(scope="module")
def example(lib, tmp_path_factory):
    """examples/c/example.c compiled as C and linked against the shared library."""
    out = tmp_path_factory.mktemp("example") / "example"
    libdir = _libdir(lib)
    _run([CC, "-std=c11", "-Wall", "-Wextra", "-Werror", os.path.join(ROOT, "examples/c/example.c"),
          f"-I{lib / 'include'}", f"-L{libdir}", "-lfastln", f"-Wl,-rpath,{libdir}", "-o", str(out)])
    return str(out)


def _example_inputs():
    """The matrix, weight and bias that example.c builds."""
    rows, cols = 3, 37
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    x = (1000 * i + (7 * j + i) % 11).astype(np.float32)
    weight = (1.0 + 0.5 * (np.arange(cols) % 4)).astype(np.float32)
    bias = (0.25 * (np.arange(cols) % 3)).astype(np.float32)
    return x, weight, bias


def _parse(stdout):
    rows = re.findall(r"^row (\d+) mean (\S+) rstd (\S+) y (.*)$", stdout, re.MULTILINE)
    mean = np.array([float(r[1]) for r in rows])
    rstd = np.array([float(r[2]) for r in rows])
    y = np.array([[float(v) for v in r[3].split()] for r in rows])
    return y, mean, rstd


def test_example_matches_numpy(example, isa):
    r = _run([example, isa], env={**os.environ, "FASTLN_ISA": ""})
    assert re.search(rf"^isa {isa}$", r.stdout, re.MULTILINE), r.stdout
    y, mean, rstd = _parse(r.stdout)
    x, w, b = (a.astype(np.float64) for a in _example_inputs())
    m = x.mean(axis=1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=1, keepdims=True)
    ref = (x - m) / np.sqrt(v + 1e-5) * w + b
    assert y.shape == ref.shape == (3, 37)
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-5 * (1 + np.abs(ref)).max())
    np.testing.assert_allclose(mean, m[:, 0], rtol=1e-7)
    np.testing.assert_allclose(rstd, 1 / np.sqrt(v[:, 0] + 1e-5), rtol=1e-6)
    assert "status -2: bad shape" in r.stdout


def test_example_links_statically(lib, tmp_path):
    """Plain C against libfastln.a: the C++ runtime and OpenMP come from the link line."""
    out = tmp_path / "example_static"
    _run([CC, os.path.join(ROOT, "examples/c/example.c"), f"-I{lib / 'include'}",
          str(_libdir(lib) / "libfastln.a"), "-lstdc++", "-lm", "-fopenmp", "-o", str(out)])
    r = _run([str(out), "scalar"])
    assert "isa scalar" in r.stdout
    y, _, _ = _parse(r.stdout)
    assert y.shape == (3, 37) and np.isfinite(y).all()


def test_example_unknown_isa_fails(example):
    r = _exec([example, "avx9"])
    assert r.returncode == 1
    assert "unknown ISA" in r.stderr


def test_fastln_isa_env_from_c(example):
    """FASTLN_ISA naming an ISA this machine cannot run: every call fails, none runs elsewhere."""
    other = "neon" if os.uname().machine in ("x86_64", "AMD64") else "avx2"
    r = _exec([example], env={**os.environ, "FASTLN_ISA": other})
    assert r.returncode == 1
    assert "cannot run the requested ISA" in r.stderr
    r = _exec([example], env={**os.environ, "FASTLN_ISA": "scalar"})
    assert r.returncode == 0 and "isa scalar" in r.stdout


def test_error_codes_from_c(lib, tmp_path):
    out = tmp_path / "c_api_errors"
    libdir = _libdir(lib)
    _run([CC, "-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror",
          os.path.join(ROOT, "tests/native/c_api_errors.c"), f"-I{lib / 'include'}",
          f"-L{libdir}", "-lfastln", "-lm", f"-Wl,-rpath,{libdir}", "-o", str(out)])
    r = _exec([str(out)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^\d+ passed, 0 failed$", r.stdout, re.MULTILINE), r.stdout


def test_shared_library_exports_only_the_c_api(lib):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("needs nm")
    so = next(_libdir(lib).glob("libfastln.so*"))
    r = _run([nm, "-D", "--defined-only", str(so)])
    names = [line.split()[-1] for line in r.stdout.splitlines() if line.strip()]
    assert "fastln_layer_norm_f32" in names and "fastln_status_string" in names
    assert [n for n in names if not n.startswith("fastln_")] == []


def test_installed_cmake_package(lib, tmp_path):
    """find_package(fastln) from an installed prefix gives a target a C program links against."""
    src = tmp_path / "consumer"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16...3.31)\n"
        "project(consumer LANGUAGES C CXX)\n"
        "find_package(fastln 0.1 REQUIRED)\n"
        f"add_executable(example {os.path.join(ROOT, 'examples/c/example.c')})\n"
        "target_link_libraries(example PRIVATE fastln::fastln_static)\n"
        "set_target_properties(example PROPERTIES LINKER_LANGUAGE CXX)\n"
    )
    build = tmp_path / "build"
    _run([CMAKE, "-S", str(src), "-B", str(build), f"-DCMAKE_PREFIX_PATH={lib}"])
    _run([CMAKE, "--build", str(build)])
    r = _run([str(build / "example"), "scalar"])
    assert "isa scalar" in r.stdout
