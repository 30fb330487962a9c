#!/usr/bin/python3
"""Writes the tensor sizes of torchvision's VGG-16, ResNet-101 and
Inception V3, one float count per line in parameter order, for shoal bench
plan --layers. Run: /usr/bin/python3 scripts/layer-sizes.py sim/models
(Debian's python3-torchvision; no weights are downloaded)."""
import sys

import torchvision.models as m

out = sys.argv[1]
for name, model in [("vgg16", m.vgg16()), ("resnet101", m.resnet101()),
                    ("inception_v3", m.inception_v3(aux_logits=True, init_weights=False))]:
    sizes = [p.numel() for p in model.parameters()]
    with open(f"{out}/{name}.txt", "w") as f:
        f.write(f"# torchvision {name}: {len(sizes)} tensors, {sum(sizes)} floats, in parameter order\n")
        f.write("\n".join(str(s) for s in sizes) + "\n")
    print(name, len(sizes), sum(sizes))
