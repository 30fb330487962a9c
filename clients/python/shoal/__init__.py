"""Shoal's parameter servers from Python.

    import shoal
    c = shoal.Client(["127.0.0.1:7070", "127.0.0.1:7071"], worker_id=1)
    step = c.join()
    flat = shoal.FlatParameters(model, c.layout)    # a torch model, Shoal's layout
    c.pull(flat.params)
    loss_fn(model(x), y).backward()
    c.push_pull(flat.flat_grads(), step, into=flat.params)

ps_pb2 and ps_pb2_grpc are generated from proto/shoalpb/ps.proto by `make
generate`. The client (and with it grpc) and the torch helper
(FlatParameters) are imported when first used, so `import shoal.torch`
(Horovod's API over Shoal's native library) needs neither grpc nor the
stubs.

shoal.run(func, args, np=N) is Horovod's horovod.run on this host (see
shoal/runner.py), so that a script's `import horovod` can become
`import shoal as horovod`.
"""

_CLIENT = ("MAX_PIECE_BYTES", "PLAN_VERSION", "Client", "PushResult", "ShoalError", "Tensor")


def __getattr__(name: str):
    if name in _CLIENT:
        from shoal import client
        return getattr(client, name)
    if name == "FlatParameters":
        from shoal.torch_params import FlatParameters
        return FlatParameters
    if name == "run":
        from shoal.runner import run
        return run
    raise AttributeError("module 'shoal' has no attribute %r" % name)


__all__ = ["Client", "FlatParameters", "MAX_PIECE_BYTES", "PLAN_VERSION", "PushResult", "ShoalError", "Tensor", "run"]
