"""PyTorch's side of bench_loader: a DataLoader over the same HDF5 file, held in memory, with the
torchvision transforms that match the compress loader's, the same batch size and worker count.

    loader_torch.py FILE.h5 --config pad32|crop224|rrc224 --workers N --batch B --seconds S

Prints one JSON line: {"images_per_s": ..., "images": ..., "seconds": ...}.
"""
import argparse
import json
import sys
import time

import h5py
import torch
import torchvision.transforms as T
from torch.utils.data import DataLoader, Dataset

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class H5Images(Dataset):
    """Every image in memory as a uint8 tensor, as the compress loader's memory mode has them."""

    def __init__(self, path, transform):
        with h5py.File(path, "r") as f:
            self.images = torch.from_numpy(f["images"][()]).permute(0, 3, 1, 2)  # N,C,H,W view
            self.labels = torch.from_numpy(f["labels"][()])
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.transform(self.images[i]), self.labels[i]


def resized_crop(size):
    try:  # bilinear without antialiasing, as compress does
        return T.RandomResizedCrop(size, antialias=False)
    except TypeError:
        return T.RandomResizedCrop(size)


def transforms(config):
    crop = {
        "pad32": lambda: T.RandomCrop(32, padding=4),
        "crop224": lambda: T.RandomCrop(224),
        "rrc224": lambda: resized_crop(224),
    }[config]()
    return T.Compose([crop, T.RandomHorizontalFlip(), T.ConvertImageDtype(torch.float32),
                      T.Normalize(MEAN, STD)])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--config", required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seconds", type=float, default=3)
    a = p.parse_args()
    loader = DataLoader(H5Images(a.file, transforms(a.config)), batch_size=a.batch, shuffle=True,
                        num_workers=a.workers, persistent_workers=a.workers > 0)
    it = iter(loader)
    next(it)  # workers started and warm, as the compress side's open
    images, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < a.seconds:
        try:
            x, _ = next(it)
        except StopIteration:
            it = iter(loader)
            continue
        images += x.shape[0]
    dt = time.perf_counter() - t0
    print(json.dumps({"images_per_s": images / dt, "images": images, "seconds": dt}))


if __name__ == "__main__":
    sys.exit(main())
