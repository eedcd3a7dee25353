"""Portable builds: the code that runs before dispatch has no AVX instruction.

A wheel built on an AVX2 machine must import and run (scalar kernels) on an x86-64 CPU without AVX.
Only kernels_avx2.cpp and kernels_avx512.cpp are compiled with AVX flags, and everything in them
that dispatch does not guard lives in namespace fastln::avx2 or fastln::avx512. So: disassemble the
extension and look for AVX in every other function, and for AVX-512 outside fastln::avx512 (the
AVX2 kernels must run on AVX2 CPUs without it). This catches -mavx2 (or -march=native) leaking into
the baseline flags, and an inline function compiled with AVX flags that the linker picked for
callers compiled without them (a COMDAT merge).
"""

import os
import re
import shutil
import subprocess

import pytest

from fastln import _core

pytestmark = [
    pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 only: NEON is baseline on aarch64"),
    pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump (binutils)"),
]

FUNC = re.compile(r"^[0-9a-f]+ <(.*)>:$")
# AVX and later: 256/512-bit registers, AVX-512 mask registers, or a VEX/EVEX-encoded instruction
# (AT&T mnemonics starting with "v" on vector registers: vmovups, vfmadd231ps, vzeroupper, ...).
YMM_ZMM_K = re.compile(r"%(ymm|zmm)\d+|%k[0-7]\b")
# AVX-512 only: ZMM, mask registers, or the 16 extra vector registers only EVEX can encode.
AVX512_REG = re.compile(r"%zmm\d+|%k[0-7]\b|%[xy]mm(1[6-9]|2\d|3[01])\b")
VEX_MNEMONIC = re.compile(r"^v[a-z0-9]+$")


def avx_users(path, avx512_only=False):
    """{demangled function name: first AVX instruction} for every function that uses AVX (with
    avx512_only: AVX-512)."""
    r = subprocess.run(
        ["objdump", "-d", "-C", "--no-show-raw-insn", path], capture_output=True, text=True, check=True
    )
    users = {}
    func = None
    for line in r.stdout.splitlines():
        m = FUNC.match(line)
        if m:
            func = m.group(1)
            continue
        parts = line.split("\t")
        if func is None or len(parts) < 2:
            continue
        insn = parts[1].strip()
        mnemonic = insn.split(" ", 1)[0]
        if avx512_only:
            if AVX512_REG.search(insn):
                users.setdefault(func, insn)
        elif YMM_ZMM_K.search(insn) or (VEX_MNEMONIC.match(mnemonic) and "%xmm" in insn) or mnemonic == "vzeroupper":
            users.setdefault(func, insn)
    return users


def in_namespace(func, ns):
    """Whether a demangled name is in fastln::<ns> (templates show their return type first)."""
    return re.search(rf"(^|\s)fastln::{ns}::", func.split("(", 1)[0]) is not None


def test_no_avx_before_dispatch():
    users = avx_users(_core.__file__)
    # The AVX2 and AVX-512 kernels are there and use AVX: the scan itself works.
    assert any(in_namespace(f, "avx2") for f in users), sorted(users)[:20]
    assert any(in_namespace(f, "avx512") for f in users), sorted(users)[:20]
    leaked = {f: i for f, i in users.items() if not (in_namespace(f, "avx2") or in_namespace(f, "avx512"))}
    assert leaked == {}, "AVX outside fastln::avx2 and fastln::avx512 (runs before dispatch): " + "; ".join(
        f"{f}: {i}" for f, i in sorted(leaked.items())[:20]
    )


def test_no_avx512_outside_its_kernels():
    users = avx_users(_core.__file__, avx512_only=True)
    assert any(in_namespace(f, "avx512") for f in users), sorted(users)[:20]
    leaked = {f: i for f, i in users.items() if not in_namespace(f, "avx512")}
    assert leaked == {}, "AVX-512 outside fastln::avx512 (runs on AVX2-only CPUs): " + "; ".join(
        f"{f}: {i}" for f, i in sorted(leaked.items())[:20]
    )



def test_sdist_ships_every_tracked_source(tmp_path):
    """Every file git tracks (but CI and git metadata) is in the sdist: a fresh clone and an
    unpacked sdist build and test the same, the C library and the native tests included."""
    import sys
    import tarfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if shutil.which("git") is None or not os.path.exists(os.path.join(root, ".git")):
        pytest.skip("needs a git checkout")
    pytest.importorskip("Cython")
    pytest.importorskip("setuptools")
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    # A clean copy: an egg-info left in the checkout would add its stale file list to the sdist.
    src = tmp_path / "src"
    for f in tracked:
        if os.path.isfile(os.path.join(root, f)):
            os.makedirs(src / os.path.dirname(f), exist_ok=True)
            shutil.copy2(os.path.join(root, f), src / f)
    r = subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "--formats=gztar", "--dist-dir", str(tmp_path)],
        cwd=src, check=False, capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stderr
    (sdist,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(sdist) as tf:
        shipped = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    missing = [
        f for f in tracked
        if f not in shipped and not f.startswith((".ci/", ".git")) and f != ".gitignore"
    ]
    assert missing == [], f"MANIFEST.in misses {missing}"
