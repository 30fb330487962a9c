"""What the peer scripts share. They run as scripts from this folder, so
Python finds this module next to them."""


def blas_name():
    """The BLAS this process loaded, from its memory map."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return "unknown"
    for name in ("openblas", "mkl", "blis", "libblas"):
        if name in maps:
            return {"libblas": "blas"}.get(name, name)
    return "none"
