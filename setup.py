"""Build of fastln's extension.

The baseline sources (Cython layer, C API, dispatch, scalar kernels) compile for the plain target:
no -march flag for the build machine, so a wheel built here runs on any x86-64 or armv8-a CPU. Each ISA's kernel file
is compiled on its own with that ISA's flags, and only dispatch decides at run time whether its
code may run.

Environment:
  FASTLN_OPENMP=0   build without OpenMP (fastln then runs single-threaded)
  FASTLN_DEBUG=1    -O0 -g
  FASTLN_CUDA=auto  build the CUDA extension fastln._cuda when nvcc is found (the default);
                    0: never; 1: nvcc is required and a failed CUDA build is an error.
                    CUDA_HOME (or CUDA_PATH) picks the toolkit; otherwise nvcc on PATH.
"""

import glob
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CompileError

HERE = os.path.dirname(os.path.abspath(__file__))
MACHINE = platform.machine().lower()
IS_X86 = MACHINE in ("x86_64", "amd64", "i686", "x86")
IS_ARM64 = MACHINE in ("aarch64", "arm64")

CXXFLAGS = ["-std=c++17", "-fvisibility=hidden", "-ffp-contract=off"]
# -g0 overrides the -g in Python's own CFLAGS: with it the extension was 75 MB instead of 8.8, and
# kernels_scalar.cpp took 205 s to compile instead of 136 (GCC 12, EPYC guest).
CXXFLAGS += ["-O0", "-g"] if os.environ.get("FASTLN_DEBUG") == "1" else ["-O3", "-g0"]

# Python's own CFLAGS carry -fwrapv, which reach every extension. The kernels never rely on signed
# overflow wrapping, and built with it layer_norm 2048x64 float32 took 34 instead of 30 us in a C++
# loop (GCC 12). It is turned off for the kernel files only.
KERNEL_FLAGS = ["-fno-wrapv"]

# x86-64-v4's AVX-512 subsets (dispatch requires all four), with FMA and F16C.
AVX512_FLAGS = ["-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq", "-mfma", "-mf16c"]

# Kernel files and the flags each one alone is compiled with. All are compiled on every target: a
# file whose ISA does not exist there compiles to a table getter that returns null.
ISA_SOURCES = [
    ("src/kernels_scalar.cpp", []),
    ("src/kernels_avx2.cpp", ["-mavx2", "-mfma", "-mf16c"] if IS_X86 else []),
    ("src/kernels_avx512.cpp", AVX512_FLAGS if IS_X86 else []),
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
        if getattr(ext, "fastln_cuda", False):
            _prepare_cuda_extension(self, ext)
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
            # The kernel files take most of the build (minutes each with -O3), so they compile in
            # parallel with each other and with build_ext's own compile of the Cython module; the
            # link waits for them.
            os.makedirs(os.path.join(self.build_temp, "src"), exist_ok=True)  # before the threads
            with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
                kernels = [
                    pool.submit(
                        self.compiler.compile,
                        [src],
                        output_dir=self.build_temp,
                        include_dirs=ext.include_dirs,
                        macros=ext.define_macros,
                        extra_postargs=CXXFLAGS + KERNEL_FLAGS + flags,
                        depends=ext.depends,
                    )
                    for src, flags in reversed(ISA_SOURCES)  # the slowest, the vector ISAs', first
                ]
                ext.extra_objects = list(ext.extra_objects or []) + self.compiler.object_filenames(
                    [src for src, _ in ISA_SOURCES], output_dir=self.build_temp
                )
                link = self.compiler.link

                def link_after_kernels(*args, **kwargs):
                    for k in kernels:
                        k.result()  # a kernel file's CompileError surfaces here
                    return link(*args, **kwargs)

                self.compiler.link = link_after_kernels
                try:
                    super().build_extension(ext)
                finally:
                    del self.compiler.link
            for k in kernels:
                k.result()  # also when build_ext found the extension up to date and did not link
            return
        super().build_extension(ext)


def _depends():
    out = []
    for root in ("src", "include"):
        for dirpath, _, files in os.walk(os.path.join(HERE, root)):
            out += [os.path.relpath(os.path.join(dirpath, f), HERE) for f in files if f.endswith(".h")]
    return out


# ---- The CUDA extension (FASTLN_CUDA) -------------------------------------------------------------
# src/cuda/*.cu compile with nvcc into objects that a thin Cython module, fastln._cuda, links with
# the static CUDA runtime: the module then imports on machines without a GPU or driver, and reports
# why it cannot run there. Nothing else in the build depends on it.

CUDA_SOURCES = sorted(glob.glob(os.path.join("src", "cuda", "*.cu")))
# Ampere and Hopper machine code, plus Hopper PTX that newer GPUs compile at load time.
NVCC_GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]


def _cuda_mode():
    mode = os.environ.get("FASTLN_CUDA", "auto").strip().lower()
    if mode in ("", "auto"):
        return "auto"
    if mode in ("0", "false", "no", "off"):
        return "0"
    if mode in ("1", "true", "yes", "on"):
        return "1"
    raise SystemExit(f"FASTLN_CUDA={mode!r}: expected auto, 0 or 1")


def _find_nvcc():
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and os.path.isfile(os.path.join(home, "bin", "nvcc")):
            return os.path.join(home, "bin", "nvcc")
    return shutil.which("nvcc")


def _cuda_home(nvcc):
    """The toolkit folder: where nvcc says it lives (it may be a wrapper script), else above it."""
    try:
        out = subprocess.run(
            [nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
            capture_output=True, text=True, timeout=60, check=False,
        )
        for line in (out.stdout + out.stderr).splitlines():
            if line.startswith("#$ _HERE_="):
                return os.path.dirname(line.split("=", 1)[1].strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))


def _cuda_lib_dir(home):
    for sub in ("lib64", "lib", os.path.join("targets", f"{platform.machine()}-linux", "lib")):
        d = os.path.join(home, sub)
        if os.path.isfile(os.path.join(d, "libcudart_static.a")) or os.path.isfile(
            os.path.join(d, "libcudart.so")
        ):
            return d
    return None


def _cuda_extension():
    """The fastln._cuda Extension, or None when FASTLN_CUDA and the machine say not to build it."""
    mode = _cuda_mode()
    if mode == "0":
        return None
    nvcc = _find_nvcc()
    if nvcc is None:
        if mode == "1":
            raise SystemExit("FASTLN_CUDA=1 but nvcc was not found (set CUDA_HOME or PATH)")
        print("fastln: nvcc not found; building without the CUDA path", file=sys.stderr)
        return None
    ext = Extension(
        "fastln._cuda",
        sources=["fastln/_cuda.pyx"],
        include_dirs=["include"],
        depends=_depends() + CUDA_SOURCES + glob.glob(os.path.join("src", "cuda", "*.cuh")),
        language="c++",
        optional=(mode == "auto"),
    )
    ext.fastln_cuda = {"nvcc": nvcc, "home": _cuda_home(nvcc)}
    return ext


def _nvcc_compile(nvcc, src, obj, deps):
    if os.path.exists(obj) and os.path.getmtime(obj) >= max(os.path.getmtime(d) for d in deps):
        return None
    cmd = [nvcc, "-c", src, "-o", obj, "-std=c++17", "-Iinclude", "-Isrc/cuda", "-Xcompiler",
           "-fPIC,-fvisibility=hidden"] + NVCC_GENCODE
    cmd += ["-O0", "-g", "-lineinfo"] if os.environ.get("FASTLN_DEBUG") == "1" else ["-O3"]
    print(" ".join(cmd), file=sys.stderr)
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return f"{src}:\n{r.stdout}{r.stderr}"
    return None


def _prepare_cuda_extension(cmd, ext):
    """Compiles the .cu files (in parallel) and adds them and the CUDA runtime to ext's link."""
    info = ext.fastln_cuda
    lib_dir = _cuda_lib_dir(info["home"])
    if lib_dir is None:
        raise CompileError(f"no CUDA runtime library under {info['home']}")
    out_dir = os.path.join(cmd.build_temp, "cuda")
    os.makedirs(out_dir, exist_ok=True)
    deps = list(ext.depends) + ["setup.py"]
    objs = [os.path.join(out_dir, os.path.basename(s)[:-3] + ".o") for s in CUDA_SOURCES]
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        errors = [e for e in pool.map(
            lambda so: _nvcc_compile(info["nvcc"], so[0], so[1], deps), zip(CUDA_SOURCES, objs)
        ) if e]
    if errors:
        raise CompileError("nvcc failed:\n" + "\n".join(errors))
    static = os.path.join(lib_dir, "libcudart_static.a")
    ext.extra_objects = list(ext.extra_objects or []) + objs
    if os.path.isfile(static):
        ext.extra_objects.append(static)
        ext.extra_link_args = list(ext.extra_link_args or []) + ["-lrt", "-lpthread", "-ldl"]
    else:
        ext.extra_link_args = list(ext.extra_link_args or []) + [
            f"-L{lib_dir}", "-lcudart", f"-Wl,-rpath,{lib_dir}"]
    ext.extra_compile_args = list(ext.extra_compile_args or []) + ["-std=c++17"]


core = Extension(
    "fastln._core",
    sources=["fastln/_core.pyx"] + BASE_SOURCES,
    include_dirs=["include", "src", np.get_include()],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")],
    depends=_depends(),
    language="c++",
)
core.fastln_core = True

cuda_ext = _cuda_extension()

extensions = cythonize(
    [core] + ([cuda_ext] if cuda_ext is not None else []),
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
    if e.name == "fastln._cuda":
        e.fastln_cuda = cuda_ext.fastln_cuda
        e.optional = cuda_ext.optional

setup(ext_modules=extensions, cmdclass={"build_ext": BuildExt})
