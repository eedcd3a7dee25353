"""Build of fastln's extension.

The baseline sources (Cython layer, C API, dispatch, scalar kernels) compile for the plain target:
no -march=native, so a wheel built here runs on any x86-64 or armv8-a CPU. Each ISA's kernel file
is compiled on its own with that ISA's flags, and only dispatch decides at run time whether its
code may run.

Environment:
  FASTLN_OPENMP=0   build without OpenMP (fastln then runs single-threaded)
  FASTLN_DEBUG=1    -O0 -g
"""

import os
import platform
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
MACHINE = platform.machine().lower()
IS_X86 = MACHINE in ("x86_64", "amd64", "i686", "x86")
IS_ARM64 = MACHINE in ("aarch64", "arm64")

CXXFLAGS = ["-std=c++17", "-fvisibility=hidden", "-ffp-contract=off"]
CXXFLAGS += ["-O0", "-g"] if os.environ.get("FASTLN_DEBUG") == "1" else ["-O3"]

# Kernel files and the flags each one alone is compiled with. All are compiled on every target: a
# file whose ISA does not exist there compiles to a table getter that returns null.
ISA_SOURCES = [
    ("src/kernels_scalar.cpp", []),
    ("src/kernels_avx2.cpp", ["-mavx2", "-mfma", "-mf16c"] if IS_X86 else []),
    ("src/kernels_neon.cpp", []),
]

BASE_SOURCES = ["src/api.cpp", "src/dispatch.cpp"]


def _env_flag(name, default):
    v = os.environ.get(name, default).strip().lower()
    return v not in ("0", "false", "no", "off", "")


def _compiler_accepts(cmd, flags):
    """Whether cmd compiles and links a tiny OpenMP program with flags."""
    src = "#include <omp.h>\nint main(){int n=0;\n#pragma omp parallel\n{n=omp_get_num_threads();}\nreturn n<1;}\n"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.cpp")
        with open(path, "w") as f:
            f.write(src)
        try:
            r = subprocess.run(
                cmd + [path] + flags + ["-o", os.path.join(d, "t")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            return False
        return r.returncode == 0


class BuildExt(build_ext):
    """Compiles each ISA's kernels with its own flags, and turns OpenMP on when the compiler has it."""

    def build_extension(self, ext):
        if getattr(ext, "fastln_core", False):
            cxx = list(self.compiler.compiler_so[:1])
            if shutil.which(cxx[0]) is None:
                cxx = ["c++"]
            openmp = _env_flag("FASTLN_OPENMP", "1") and _compiler_accepts(cxx, ["-fopenmp"])
            omp = ["-fopenmp"] if openmp else []
            if not openmp:
                print("fastln: building without OpenMP (single-threaded)", file=sys.stderr)
            ext.extra_compile_args = CXXFLAGS + omp
            ext.extra_link_args = list(ext.extra_link_args or []) + omp
            objects = []
            for src, flags in ISA_SOURCES:
                objects += self.compiler.compile(
                    [src],
                    output_dir=self.build_temp,
                    include_dirs=ext.include_dirs,
                    macros=ext.define_macros,
                    extra_postargs=CXXFLAGS + flags,
                    depends=ext.depends,
                )
            ext.extra_objects = list(ext.extra_objects or []) + objects
        super().build_extension(ext)


def _depends():
    out = []
    for root in ("src", "include"):
        for dirpath, _, files in os.walk(os.path.join(HERE, root)):
            out += [os.path.relpath(os.path.join(dirpath, f), HERE) for f in files if f.endswith(".h")]
    return out


core = Extension(
    "fastln._core",
    sources=["fastln/_core.pyx"] + BASE_SOURCES,
    include_dirs=["include", "src", np.get_include()],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")],
    depends=_depends(),
    language="c++",
)
core.fastln_core = True

extensions = cythonize(
    [core],
    compiler_directives={
        "language_level": 3,
        "boundscheck": False,
        "wraparound": False,
        "cdivision": True,
        "embedsignature": True,
    },
)
# cythonize returns new Extension objects; keep our marker on them.
for e in extensions:
    if e.name == "fastln._core":
        e.fastln_core = True

setup(ext_modules=extensions, cmdclass={"build_ext": BuildExt})
