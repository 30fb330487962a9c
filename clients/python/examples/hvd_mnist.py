#!/usr/bin/env python3
"""Fashion-MNIST through Horovod's PyTorch API (`import shoal.torch as hvd`)
on Shoal's ring: a small CNN, each rank training on its share of the data
(DistributedSampler) with DistributedOptimizer, the test accuracy counted
over all ranks.

    make libshoal torchvision-data
    PYTHONPATH=clients/python mpirun -np 2 /usr/bin/python3 \\
        clients/python/examples/hvd_mnist.py --data-dir build/torchvision-data

(or one process per rank with SHOAL_RANK, SHOAL_WORLD_SIZE, SHOAL_MASTER;
one process alone needs none). As in Horovod's examples the learning rate
is scaled by the number of ranks (not with --use-adasum). --train-limit and
--test-limit take the first N images only (libshoal_test.go's
TestHorovodMNIST trains on a subset); --json prints, on every rank, a line
with the accuracy and a checksum of the final weights, which must be the
same on every rank.
"""

import argparse
import hashlib
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms

import shoal.torch as hvd


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 5), nn.MaxPool2d(2), nn.ReLU(),
            nn.Conv2d(16, 32, 5), nn.MaxPool2d(2), nn.ReLU(),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Dropout(0.25),
                                  nn.Linear(64, 10))

    def forward(self, x):
        return self.head(self.features(x))


def options():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default="build/torchvision-data",
                   help="holds FashionMNIST/raw/ (make torchvision-data); nothing is downloaded")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="per rank and backward pass")
    p.add_argument("--lr", type=float, default=0.01, help="for one rank; scaled by the number of ranks")
    p.add_argument("--momentum", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--fp16-allreduce", action="store_true", help="float16 gradients on the wire")
    p.add_argument("--use-adasum", action="store_true", help="combine the gradients with AdaSum")
    p.add_argument("--batches-per-allreduce", type=int, default=1,
                   help="backward passes accumulated locally per allreduce (backward_passes_per_step)")
    p.add_argument("--gradient-predivide-factor", type=float, default=1.0)
    p.add_argument("--train-limit", type=int, default=0, help="train on the first N images only")
    p.add_argument("--test-limit", type=int, default=0, help="test on the first N images only")
    p.add_argument("--json", action="store_true", help="print the result as JSON on every rank")
    return p.parse_args()


def dataset(args, train):
    norm = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.2860,), (0.3530,))])
    ds = datasets.FashionMNIST(args.data_dir, train=train, download=False, transform=norm)
    limit = args.train_limit if train else args.test_limit
    return Subset(ds, range(min(limit, len(ds)))) if limit else ds


def evaluate(model, loader):
    """Loss and accuracy over every rank's share of the test set."""
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, count
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            totals += torch.tensor([F.cross_entropy(out, y, reduction="sum").item(),
                                    (out.argmax(1) == y).sum().item(), len(y)], dtype=torch.float64)
    totals = hvd.allreduce(totals, op=hvd.Sum, name="test.totals")
    return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()


def main():
    args = options()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    n, rank = hvd.size(), hvd.rank()

    k = args.batches_per_allreduce
    train_set, test_set = dataset(args, True), dataset(args, False)
    train_sampler = DistributedSampler(train_set, num_replicas=n, rank=rank, seed=args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size * k, sampler=train_sampler)
    test_loader = DataLoader(test_set, batch_size=1000,
                             sampler=DistributedSampler(test_set, num_replicas=n, rank=rank, shuffle=False))

    model = SmallCNN()
    scale = 1 if args.use_adasum else n * k
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * scale, momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    opt = hvd.DistributedOptimizer(
        opt, named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none,
        op=hvd.Adasum if args.use_adasum else hvd.Average,
        backward_passes_per_step=k, gradient_predivide_factor=args.gradient_predivide_factor)

    start = time.time()
    for epoch in range(1, args.epochs + 1):
        model.train()
        train_sampler.set_epoch(epoch)
        for x, y in train_loader:
            opt.zero_grad()
            for xs, ys in zip(x.split(args.batch_size), y.split(args.batch_size)):
                # each pass's share of the batch's mean loss
                (F.cross_entropy(model(xs), ys) * len(ys) / len(y)).backward()
            opt.step()
        loss, acc = evaluate(model, test_loader)
        if rank == 0 and not args.json:
            print("epoch %d: test loss %.4f, accuracy %.2f%% (%d ranks, %.1f s)"
                  % (epoch, loss, 100 * acc, n, time.time() - start), flush=True)
    if args.json:
        digest = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in model.state_dict().values()))
        print(json.dumps({"rank": rank, "size": n, "epochs": args.epochs, "test_loss": loss, "accuracy": acc,
                          "weights_sha256": digest.hexdigest(), "seconds": time.time() - start}), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
