"""libshoal_test.go's TestHorovodRun: Horovod's horovod.run(func, args, np)
as `import shoal as horovod` gives it. Prints one JSON line: what each rank
returned, what a failing rank raised, and whether `import shoal` loaded
grpc (it must not)."""

import json
import sys

import shoal as horovod


def work(scale):
    import torch

    import shoal.torch as hvd
    hvd.init()
    x = torch.full((3,), float(hvd.rank() + 1) * scale)
    out = {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
           "sum": hvd.allreduce(x, op=hvd.Sum).tolist()}
    hvd.shutdown()
    return out


def fail(victim):
    import shoal.torch as hvd
    hvd.init()
    r = hvd.rank()
    hvd.shutdown()
    if r == victim:
        raise ValueError("rank %d fails on purpose" % r)
    return r


if __name__ == "__main__":
    grpc = "grpc" in sys.modules
    n = int(sys.argv[1])
    res = horovod.run(work, args=(2.0,), np=n, hosts="localhost:%d" % n, use_gloo=True)
    try:
        horovod.run(fail, args=(1,), np=2)
        err = "no error"
    except RuntimeError as e:
        err = str(e)
    print(json.dumps({"results": res, "failure": err, "grpc_imported": grpc}), flush=True)
