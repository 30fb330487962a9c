"""A client of Shoal's parameter servers (`shoal ps`) over grpcio.

It speaks what Shoal's Go client (package client) sends, message for
message: tensors as little-endian float32 bytes in pieces of at most
MAX_PIECE_BYTES, a push's header on its first piece, each shard sent the
chunks it owns (merged where adjacent) in vector order.
"""

from __future__ import annotations

import concurrent.futures
import random
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

import grpc
import numpy as np

from shoal import ps_pb2 as pb
from shoal import ps_pb2_grpc as pb_grpc

# shard.Version: the partition function this client understands.
PLAN_VERSION = 2
# wire.MaxPieceBytes and wire.MaxMessageBytes.
MAX_PIECE_BYTES = 1 << 20
MAX_MESSAGE_BYTES = MAX_PIECE_BYTES + (64 << 10)
_PIECE_FLOATS = MAX_PIECE_BYTES // 4
_F32 = np.dtype("<f4")

T = TypeVar("T")


# pb.ErrorDomain, pb.ReasonNotMember and pb.ReasonNoSession
# (proto/shoalpb/reasons.go).
ERROR_DOMAIN = "shoal.dev"
REASON_NOT_MEMBER = "NOT_IN_LIVE_SET"
REASON_NO_SESSION = "NO_SESSION"


class ShoalError(Exception):
    """A call failed. code is the gRPC status code (None for a check this
    client made itself), details the server's message and reason the
    reason of the google.rpc.ErrorInfo Shoal attached, if any (see
    not_member)."""

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None, details: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.details = details
        self.reason = reason

    @property
    def not_member(self) -> bool:
        """A sync or SSP shard took this worker out of its live set
        (membership declared it dead): join() again and go on from the step
        it returns, as the Go worker does."""
        return self.reason == REASON_NOT_MEMBER

    @property
    def not_yours(self) -> bool:
        """A shard binds the worker id of the call to another client:
        another client joined as it since this one did (or this one never
        joined it). This client no longer speaks for the worker."""
        return self.code == grpc.StatusCode.PERMISSION_DENIED


@dataclass(frozen=True)
class Tensor:
    """One tensor of the servers' layout: its name (e.g. fc1.weight), shape
    and offset in the flat vector, in floats."""
    name: str
    shape: Tuple[int, ...]
    offset: int

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class PushResult:
    """What the shards did with a push: their clocks after it, how many had
    applied this step already (a retry), how many dropped it (a sync
    backup worker's late push) and the staleness each saw."""
    clocks: List[int]
    duplicates: int
    dropped: int
    staleness: List[int]


def _float_view(buf, n: int, what: str) -> np.ndarray:
    """buf (a numpy array or a CPU torch tensor) as a writable float32 numpy
    array of n values sharing its memory."""
    if not isinstance(buf, np.ndarray) and hasattr(buf, "numpy"):  # a torch tensor
        if getattr(buf, "device", None) is not None and buf.device.type != "cpu":
            raise ShoalError("%s: a tensor on %s; want one on the CPU" % (what, buf.device))
        buf = buf.detach().numpy()
    if not isinstance(buf, np.ndarray):
        raise ShoalError("%s: a %s; want a numpy array or a torch tensor" % (what, type(buf).__name__))
    if buf.dtype != np.float32 or not buf.flags.c_contiguous:
        raise ShoalError("%s: %s array (contiguous: %s); want contiguous float32" % (what, buf.dtype, buf.flags.c_contiguous))
    flat = buf.reshape(-1)
    if flat.size != n:
        raise ShoalError("%s: %d floats, the vector has %d" % (what, flat.size, n))
    return flat


def _little_endian(a: np.ndarray) -> np.ndarray:
    return a if sys.byteorder == "little" else a.astype(_F32)


class Client:
    """Connected to every shard of one plan.

    addrs are the shards' addresses (HOST:PORT) in shard order, as `shoal
    worker --servers` takes them. The client asks each for its Info
    (waiting up to connect_timeout seconds for a shard that is still
    starting) and checks that they form one plan. Each call has a deadline
    of call_timeout seconds; calls failing with UNAVAILABLE are tried again
    with backoff, retries times in all (the servers apply each (worker,
    step) once, so a retried push is safe). worker_id is the worker this
    client pushes and pulls as (0..workers-1; join() sets it too).

    Each shard binds a worker id to the client that joined as it: join()
    returns a session per shard, which this client keeps and sends with
    the worker's pushes and pulls; only it may speak for the worker there.
    A shard that holds no session for the worker (it restarted, or the
    worker never joined it) says so, and the client binds the worker there
    again, which admits nothing, and repeats the call; a shard that holds
    another client's fails the call (ShoalError.not_yours).

    It remembers the clocks of the last pull and the step the next pull
    waits for, as Shoal's Go worker does: a push carries the clocks of the
    weights its gradient was computed on, and in sync mode the next pull
    waits until each shard applied the step pushed. One training loop uses
    a client at a time: it is not meant for concurrent calls.
    """

    def __init__(self, addrs: Union[str, Sequence[str]], worker_id: int = 0, *, connect_timeout: float = 60.0,
                 call_timeout: float = 60.0, retries: int = 16,
                 credentials: Optional[grpc.ChannelCredentials] = None) -> None:
        if isinstance(addrs, str):
            addrs = [a for a in addrs.split(",") if a]
        if not addrs:
            raise ShoalError("no server addresses")
        self.addrs: List[str] = list(addrs)
        self.worker_id = worker_id
        self.call_timeout = call_timeout
        self.retries = max(1, retries)
        opts = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                # A channel of its own per shard, not one shared subchannel.
                ("grpc.use_local_subchannel_pool", 1)]
        self._channels = []
        for a in self.addrs:
            if credentials is None:
                self._channels.append(grpc.insecure_channel(a, options=opts))
            else:
                self._channels.append(grpc.secure_channel(a, credentials, options=opts))
        self._stubs = [pb_grpc.ParameterServerStub(c) for c in self._channels]
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(self.addrs), thread_name_prefix="shoal")
        try:
            self._handshake(connect_timeout)
        except BaseException:
            self.close()
            raise
        n = len(self.addrs)
        self.clocks: List[int] = list(self._info_clocks)
        self._next_pull: List[int] = [0] * n
        # Per shard, the session of the worker this client joined as (b"":
        # none yet), and the push interval it joined with.
        self._sessions: List[bytes] = [b""] * n
        self._push_every = 1

    # ---- setup ------------------------------------------------------------

    def _handshake(self, timeout: float) -> None:
        infos = []
        for i, stub in enumerate(self._stubs):
            try:
                infos.append(stub.Info(pb.InfoRequest(), timeout=timeout, wait_for_ready=True))
            except grpc.RpcError as e:
                raise _error("info from server %s" % self.addrs[i], e) from None
        first = infos[0]
        p = first.plan
        if not first.HasField("plan"):
            raise ShoalError("server %s sent no partition plan" % self.addrs[0])
        if p.version != PLAN_VERSION:
            raise ShoalError("server %s uses plan version %d, this client %d" % (self.addrs[0], p.version, PLAN_VERSION))
        if p.servers != len(self.addrs):
            raise ShoalError("server %s is part of a plan of %d servers, but %d addresses were given"
                             % (self.addrs[0], p.servers, len(self.addrs)))
        self.vector_length: int = p.vector_length
        self.chunk_floats: int = p.chunk_floats
        self.mode: str = first.mode
        self.workers: int = first.workers
        self.backup_workers: int = first.backup_workers
        self.staleness: int = first.staleness
        self.optimizer: str = first.optimizer
        self.layout: List[Tensor] = [Tensor(t.name, tuple(t.shape), t.offset) for t in first.layout]
        self._ranges: List[List[Tuple[int, int]]] = []
        self._info_clocks: List[int] = []
        for i, info in enumerate(infos):
            q = info.plan
            if info.shard != i:
                raise ShoalError("server %s says it is shard %d, but it is listed as shard %d" % (self.addrs[i], info.shard, i))
            if (q.version, q.vector_length, q.servers, q.chunk_floats) != (p.version, p.vector_length, p.servers, p.chunk_floats):
                raise ShoalError("server %s has plan %s, server %s has %s" % (self.addrs[i], q, self.addrs[0], p))
            if (info.mode, info.workers, info.backup_workers, info.staleness) != (
                    first.mode, first.workers, first.backup_workers, first.staleness):
                raise ShoalError("server %s runs mode %s (workers %d), server %s mode %s (workers %d)"
                                 % (self.addrs[i], info.mode, info.workers, self.addrs[0], first.mode, first.workers))
            merged: List[Tuple[int, int]] = []
            for r in info.ranges:
                if merged and merged[-1][0] + merged[-1][1] == r.offset:
                    merged[-1] = (merged[-1][0], merged[-1][1] + r.length)
                else:
                    merged.append((r.offset, r.length))
            if sum(n for _, n in merged) != info.floats:
                raise ShoalError("server %s owns ranges of %d floats but says %d" % (self.addrs[i], sum(n for _, n in merged), info.floats))
            self._ranges.append(merged)
            self._info_clocks.append(info.clock)
        if sum(info.floats for info in infos) != self.vector_length:
            raise ShoalError("the shards own %d floats of a vector of %d" % (sum(i.floats for i in infos), self.vector_length))

    def close(self) -> None:
        """Closes the connections."""
        self._pool.shutdown(wait=True)
        for c in self._channels:
            c.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- calls ------------------------------------------------------------

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        """call() until it succeeds, fails other than UNAVAILABLE or runs out
        of attempts (backoff from 50 ms doubling to 2 s, with jitter, as the
        Go client's)."""
        backoff = 0.05
        for attempt in range(1, self.retries + 1):
            try:
                return call()
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or attempt == self.retries:
                    raise _error(what, e) from None
            time.sleep(backoff / 2 + random.uniform(0, backoff / 2))
            backoff = min(2 * backoff, 2.0)
        raise AssertionError("unreachable")

    def _fan_out(self, f: Callable[[int], T]) -> List[T]:
        """f(shard) for every shard at once; the first failure is raised
        once all have ended."""
        futures = [self._pool.submit(f, s) for s in range(len(self._stubs))]
        concurrent.futures.wait(futures)
        return [fu.result() for fu in futures]

    def info(self) -> List[pb.InfoResponse]:
        """Every shard's Info now: its clock, stats (pushes, duplicates,
        dropped, rejected…), live workers."""
        return self._fan_out(lambda s: self._retry("info from server %s" % self.addrs[s],
                                                   lambda: self._stubs[s].Info(pb.InfoRequest(), timeout=self.call_timeout)))

    def join(self, worker_id: Optional[int] = None, push_every: int = 1) -> int:
        """Tells every shard that worker_id (default: the client's) starts,
        or starts again, and returns the step it begins at, which the shards
        agree on (asking again, not before the latest step named, until
        they do). The next pull waits for that step, as the Go worker's
        does. Each shard binds the worker to this client (a session, which
        the client keeps); push_every is how many steps apart the worker
        pushes (the shards name no step its earlier pushes could not have
        reached at that rate)."""
        if worker_id is not None:
            self.worker_id = worker_id
        self._push_every = push_every
        at = 0
        for _ in range(16):
            steps = self._fan_out(lambda s: self._join_shard(s, at, False))
            if min(steps) == max(steps):
                self._next_pull = [steps[0]] * len(steps)
                return steps[0]
            at = max(steps)
        raise ShoalError("join worker %d: after 16 rounds the shards still name different steps %s" % (self.worker_id, steps))

    def _join_shard(self, s: int, not_before: int, rebind: bool) -> int:
        """Joins (rebind: only binds) the worker at shard s, keeps the
        session and returns the step the shard names."""
        req = pb.JoinWorkerRequest(worker_id=self.worker_id, plan_version=PLAN_VERSION, not_before=not_before,
                                   push_every=self._push_every, rebind=rebind)
        resp = self._retry("%s worker %d at server %s" % ("bind" if rebind else "join", self.worker_id, self.addrs[s]),
                           lambda: self._stubs[s].JoinWorker(req, timeout=self.call_timeout))
        if not resp.session:
            raise ShoalError("server %s: its join returned no session" % self.addrs[s], grpc.StatusCode.INTERNAL)
        self._sessions[s] = resp.session
        return resp.step

    def _as_worker(self, s: int, what: str, call: Callable[[bytes], T]) -> T:
        """self._retry(what, call(session)) for shard s as this worker;
        where the shard holds no session for it, binds it there again and
        calls once more."""
        try:
            return self._retry(what, lambda: call(self._sessions[s]))
        except ShoalError as e:
            if e.reason != REASON_NO_SESSION:
                raise
        self._join_shard(s, 0, True)
        return self._retry(what, lambda: call(self._sessions[s]))

    def pull(self, into, step: Union[None, int, Sequence[int]] = None) -> List[int]:
        """Fills into (a float32 numpy array or CPU torch tensor of
        vector_length values) with the whole vector and returns each shard's
        clock, which the next push carries.

        step is the step the worker is about to compute: a sync shard
        answers once it applied every step before it, an SSP shard once it
        is within the staleness bound. None: the step after the last push
        (or where join() said to begin)."""
        dst = _float_view(into, self.vector_length, "pull")
        steps = self._steps(step)

        def one(s: int) -> int:
            def call(session: bytes) -> int:
                req = pb.PullRequest(worker_id=self.worker_id, plan_version=PLAN_VERSION, step=steps[s], session=session)
                return self._recv(s, self._stubs[s].Pull(req, timeout=self.call_timeout), dst, False)[0]
            return self._as_worker(s, "pull from %s" % self.addrs[s], call)

        self.clocks = self._fan_out(one)
        return list(self.clocks)

    def push(self, grads, step: int, clocks: Optional[Sequence[int]] = None) -> PushResult:
        """Sends each shard its part of grads (vector_length float32 values,
        the gradient of the mean loss of a batch) as this worker's push for
        step, its step counter (increasing; each (worker, step) is applied
        once). clocks default to those of the last pull."""
        g = self._grads(grads)
        clocks = self._clocks(clocks)
        replies = self._fan_out(lambda s: self._as_worker(
            s, "push to %s" % self.addrs[s],
            lambda session: self._stubs[s].Push(self._pieces(s, self._header(s, step, clocks, session), g), timeout=self.call_timeout)))
        self._next_pull = self._after_push(step, clocks)
        return _push_result(replies)

    def push_pull(self, grads, step: int, into, clocks: Optional[Sequence[int]] = None) -> PushResult:
        """push(grads, step) and then, in the same round trip per shard, the
        pull of the next step's weights into into (the Go worker's step).
        The pulled clocks are kept for the next push."""
        g = self._grads(grads)
        dst = _float_view(into, self.vector_length, "push-pull")
        clocks = self._clocks(clocks)
        steps = self._after_push(step, clocks)

        def one(s: int) -> Tuple[int, pb.PushResponse]:
            def call(session: bytes) -> Tuple[int, pb.PushResponse]:
                h = self._header(s, step, clocks, session)
                h.pull, h.pull_step = True, steps[s]
                return self._recv(s, self._stubs[s].PushPull(self._pieces(s, h, g), timeout=self.call_timeout), dst, True)
            return self._as_worker(s, "push-pull with %s" % self.addrs[s], call)

        res = self._fan_out(one)
        self.clocks, self._next_pull = [c for c, _ in res], steps
        return _push_result([r for _, r in res])

    # ---- pieces -----------------------------------------------------------

    def _steps(self, step: Union[None, int, Sequence[int]]) -> List[int]:
        n = len(self._stubs)
        if step is None:
            return list(self._next_pull)
        if isinstance(step, int):
            return [step] * n
        if len(step) != n:
            raise ShoalError("pull with %d steps, want one per shard (%d)" % (len(step), n))
        return list(step)

    def _clocks(self, clocks: Optional[Sequence[int]]) -> List[int]:
        if clocks is None:
            return list(self.clocks)
        if len(clocks) != len(self._stubs):
            raise ShoalError("push with %d clocks, want one per shard (%d)" % (len(clocks), len(self._stubs)))
        return list(clocks)

    def _grads(self, grads) -> np.ndarray:
        return _little_endian(_float_view(grads, self.vector_length, "push"))

    def _after_push(self, step: int, clocks: List[int]) -> List[int]:
        """The steps a pull after this push waits for, per shard (worker.Sync,
        worker.Async): in sync mode each shard's step after the one pushed,
        else the worker's next step."""
        if self.mode == "sync":
            return [c + 1 for c in clocks]
        return [step + 1] * len(self._stubs)

    def _header(self, s: int, step: int, clocks: List[int], session: bytes) -> pb.PushHeader:
        return pb.PushHeader(worker_id=self.worker_id, step=step, clock=clocks[s], plan_version=PLAN_VERSION,
                             ranges=[pb.Range(offset=o, length=n) for o, n in self._ranges[s]],
                             encoding=pb.FLOAT32, session=session)

    def _pieces(self, s: int, header: pb.PushHeader, g: np.ndarray) -> Iterator[pb.PushPiece]:
        """Shard s's part of g in pieces of at most MAX_PIECE_BYTES, none
        across a range's end, the first with the header."""
        first = True
        for off, n in self._ranges[s]:
            for at in range(off, off + n, _PIECE_FLOATS):
                data = g[at:min(at + _PIECE_FLOATS, off + n)].tobytes()
                if first:
                    yield pb.PushPiece(header=header, grads=data)
                    first = False
                else:
                    yield pb.PushPiece(grads=data)

    def _recv(self, s: int, pieces, dst: np.ndarray, pushed: bool) -> Tuple[int, Optional[pb.PushResponse]]:
        """Reads shard s's pieces into dst, checking that they are its whole
        share, and returns their clock and (pushed) the push's result the
        first piece carries."""
        got, clock, res = 0, 0, None
        for i, p in enumerate(pieces):
            if i == 0:
                res = p.push if p.HasField("push") else None
            clock = p.clock
            n = len(p.values)
            if n == 0:
                continue
            k = n // 4
            if n % 4 or not self._owns(s, p.offset, k):
                raise ShoalError("server %s sent a piece at offset %d of %d bytes, outside its chunks"
                                 % (self.addrs[s], p.offset, n), grpc.StatusCode.INTERNAL)
            dst[p.offset:p.offset + k] = np.frombuffer(p.values, dtype=_F32)
            got += k
        if pushed and res is None:
            raise ShoalError("server %s: its reply to a push-pull carries no push result" % self.addrs[s], grpc.StatusCode.INTERNAL)
        want = sum(n for _, n in self._ranges[s])
        if got != want:
            raise ShoalError("server %s sent %d floats, it owns %d" % (self.addrs[s], got, want), grpc.StatusCode.INTERNAL)
        return clock, res

    def _owns(self, s: int, off: int, k: int) -> bool:
        return k > 0 and any(o <= off and off + k <= o + n for o, n in self._ranges[s])


def _push_result(replies: Sequence[pb.PushResponse]) -> PushResult:
    return PushResult(clocks=[r.clock for r in replies], duplicates=sum(r.duplicate for r in replies),
                      dropped=sum(r.dropped for r in replies), staleness=[r.staleness for r in replies])


def _error(what: str, e: grpc.RpcError) -> ShoalError:
    code = e.code() if hasattr(e, "code") else None
    details = (e.details() if hasattr(e, "details") else "") or ""
    name = code.name if code is not None else "UNKNOWN"
    reason = ""
    for key, value in (e.trailing_metadata() if hasattr(e, "trailing_metadata") else None) or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            reason = _shoal_reason(value)
    return ShoalError("%s: %s: %s" % (what, name, details), code, details, reason)


def _shoal_reason(status: bytes) -> str:
    """The reason of a google.rpc.ErrorInfo in Shoal's domain among the
    details of a serialized google.rpc.Status (read field by field: the
    google.rpc protos are not part of Debian's python3-protobuf)."""
    try:
        for num, any_msg in _fields(status):
            if num != 3:  # Status.details, a google.protobuf.Any
                continue
            f = dict(_fields(any_msg))
            if not f.get(1, b"").endswith(b"google.rpc.ErrorInfo"):
                continue
            info = dict(_fields(f.get(2, b"")))
            if info.get(2, b"").decode() == ERROR_DOMAIN:
                return info.get(1, b"").decode()
    except (ValueError, IndexError, UnicodeDecodeError):
        pass
    return ""


def _fields(buf: bytes) -> Iterator[Tuple[int, bytes]]:
    """The length-delimited fields of a protobuf message (number, bytes);
    other wire types are skipped."""
    i = 0

    def varint() -> int:
        nonlocal i
        x = shift = 0
        while True:
            b = buf[i]
            i += 1
            x |= (b & 0x7F) << shift
            if b < 0x80:
                return x
            shift += 7

    while i < len(buf):
        tag = varint()
        wt = tag & 7
        if wt == 0:
            varint()
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        elif wt == 2:
            n = varint()
            if i + n > len(buf):
                raise ValueError("truncated field")
            yield tag >> 3, buf[i:i + n]
            i += n
        else:
            raise ValueError("wire type %d" % wt)
