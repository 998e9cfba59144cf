"""Writes the state_dict of a torchvision classifier as tests/models/<name>.txt: one line per
tensor, "<key> param|state <dims...>", in state_dict order, without the num_batches_tracked
counters. test_models.c checks that the built-in architecture of that name has exactly these
values. The committed files came from Debian's python3-torchvision 0.14.1:

    for m in resnet18 resnet50 mobilenet_v2 mobilenet_v3_small mobilenet_v3_large efficientnet_b0
    do python3 tests/models/torchvision_keys.py $m > tests/models/$m.txt; done
"""
import sys

import torchvision.models as models

model = getattr(models, sys.argv[1])()
params = dict(model.named_parameters())
for key, value in model.state_dict().items():
    if key.endswith("num_batches_tracked"):
        continue
    print(key, "param" if key in params else "state", *value.shape)
