"""Gradient compression, as horovod.torch.compression: Compression.none,
Compression.fp16 and Compression.bf16. For float32 tensors the library does
the narrowing itself, on the wire (values are accumulated in float32);
other compressors' compress/decompress run around the allreduce."""

import torch


class Compressor:
    """compress(tensor) -> (tensor, ctx); decompress(tensor, ctx) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor(Compressor):
    dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point:
            return tensor.type(cls.dtype), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.type(ctx) if ctx is not None and ctx.is_floating_point else tensor


class FP16Compressor(_CastCompressor):
    dtype = torch.float16


class BF16Compressor(_CastCompressor):
    dtype = torch.bfloat16


class Compression:
    """The compressors DistributedOptimizer and allreduce accept."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
