"""The ctypes binding of libshoal (cmd/libshoal): Shoal's collectives in Go,
fed the tensors' memory. Nothing here loops over elements in Python.

The library is found at $SHOAL_LIBRARY, else libshoal.so beside this file;
build it with

    go build -buildmode=c-shared -o clients/python/shoal/torch/libshoal.so ./cmd/libshoal
"""

import ctypes
import os

import torch

ABI_VERSION = 2
ERR_LEN = 4096

# tensorcoll's enumerations (cmd/libshoal's doc).
DTYPES = {
    torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3,
    torch.int32: 4, torch.int64: 5, torch.uint8: 6, torch.int8: 7, torch.int16: 8, torch.bool: 9,
}
COMPRESSION_NONE, COMPRESSION_FP16, COMPRESSION_BF16 = 0, 1, 2
FLAG_NO_SHM, FLAG_NO_CHECK = 1, 2


class HorovodInternalError(RuntimeError):
    """A collective failed (a peer died or went silent, ranks submitted
    different collectives, or the library is shut down); as in Horovod,
    after a failure part-way the ranks must start again."""


def library_path():
    p = os.environ.get("SHOAL_LIBRARY")
    if p:
        return p
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libshoal.so")


_lib = None


def lib():
    """The loaded library (loaded once), with its signatures declared."""
    global _lib
    if _lib is not None:
        return _lib
    path = library_path()
    if not os.path.exists(path):
        raise ImportError(
            "shoal.torch: %s not found: build it with `go build -buildmode=c-shared -o %s ./cmd/libshoal` "
            "in Shoal's repository, or point SHOAL_LIBRARY at it" % (path, path))
    L = ctypes.CDLL(path)  # CDLL releases the GIL during each call
    i64, i32, p, s, d = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_double
    sig = {
        "shoal_abi_version": ([], i32),
        "shoal_init": ([i32, i32, i32, i32, s, s, i64, i32, p, i32], i64),
        "shoal_identity": ([i64, p], i32),
        "shoal_allreduce": ([i64, p, i64, i32, i32, i32, d, d, s, p, i32], i64),
        "shoal_broadcast": ([i64, p, i64, i32, i32, s, p, i32], i64),
        "shoal_allgather": ([i64, p, i64, i32, i64, s, p, i32], i64),
        "shoal_barrier": ([i64, p, i32], i64),
        "shoal_poll": ([i64, i64], i32),
        "shoal_wait": ([i64, i64, p, i32], i32),
        "shoal_result_bytes": ([i64, i64, p], i64),
        "shoal_result_copy": ([i64, i64, p], i32),
        "shoal_shutdown": ([i64, p, i32], i32),
        "shoal_ps_write_model": ([s, s, p, i64, p, i32], i32),
        "shoal_ps_open": ([s, i32, i64, p, i32], i64),
        "shoal_ps_params": ([i64, p, i64, p, i32], i32),
        "shoal_ps_push": ([i64, p, p, i64, p, i32], i32),
        "shoal_ps_stats": ([i64, p], i32),
        "shoal_ps_close": ([i64, p, i32], i32),
    }
    for name, (args, res) in sig.items():
        f = getattr(L, name)
        f.argtypes, f.restype = args, res
    v = L.shoal_abi_version()
    if v != ABI_VERSION:
        raise ImportError("shoal.torch: %s implements C ABI %d, this module wants %d: rebuild it" % (path, v, ABI_VERSION))
    _lib = L
    return L


def errbuf():
    return ctypes.create_string_buffer(ERR_LEN)


def message(buf):
    return buf.value.decode("utf-8", "replace")


def dtype_code(t):
    try:
        return DTYPES[t.dtype]
    except KeyError:
        raise TypeError("shoal.torch: tensors of %s are not supported (supported: %s)"
                        % (t.dtype, ", ".join(str(k).replace("torch.", "") for k in DTYPES)))
