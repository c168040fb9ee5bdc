#!/usr/bin/env python3
"""Compiles the CUDA runtime's kernels (src/runtime/cuda/kernels.cu) with NVRTC, the way the
runtime does on a GPU machine, in both half-conversion variants (the hardware instructions,
and the portable bit code that a HIP build would use). Needs no GPU: NVRTC comes from PyPI's
nvidia-cuda-nvrtc wheel, fetched into target/nvrtc on first use.

    python3 crates/hrx/scripts/check-kernels.py [--arch compute_90]
"""
import argparse
import ctypes
import glob
import os
import subprocess
import sys
import zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SRC = os.path.join(ROOT, "crates/hrx/src/runtime/cuda/kernels.cu")
CACHE = os.path.join(ROOT, "target/nvrtc")


def nvrtc():
    libs = glob.glob(os.path.join(CACHE, "**/libnvrtc.so.*"), recursive=True)
    libs = [l for l in libs if "builtins" not in l and "alt" not in l]
    if not libs:
        os.makedirs(CACHE, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", CACHE,
                        "nvidia-cuda-nvrtc"], check=True)
        for whl in glob.glob(os.path.join(CACHE, "*.whl")):
            zipfile.ZipFile(whl).extractall(CACHE)
        return nvrtc()
    return ctypes.CDLL(sorted(libs)[-1])


def compile_once(lib, src, opts):
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"hrx_kernels.cu", 0, None, None)
    if rc != 0:
        return rc, "nvrtcCreateProgram failed", 0
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    ptx = 0
    if rc == 0:
        lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
        ptx = n.value
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc, log.value.decode(errors="replace"), ptx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="compute_90")
    args = ap.parse_args()
    lib = nvrtc()
    src = open(SRC, "rb").read()
    base = [f"--gpu-architecture={args.arch}".encode(), b"--std=c++17", b"-default-device"]
    failed = False
    for name, extra in [("hardware half conversions", []), ("portable half conversions", [b"-DHRX_SOFT_HALF"])]:
        rc, log, ptx = compile_once(lib, src, base + extra)
        print(f"{name}: {'ok, ' + str(ptx) + ' bytes of PTX' if rc == 0 else 'FAILED (' + str(rc) + ')'}")
        if log.strip():
            print(log)
        failed |= rc != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
