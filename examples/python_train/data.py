"""The small data set python_train generates on first run: 256x256 JPEG images of coloured shapes, each with a
same-stem .txt caption that describes it (so the caption embedding carries information about the latent).
Deterministic from the seed: the scene generator of examples/jit_train_demo/data.hpp (splitmix64), images drawn
with numpy and encoded by jitembed.encode_jpeg (TurboJPEG, quality 90)."""
import os

import numpy as np

MASK = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


class Rng:
    """data.hpp's rng: splitmix64 over a counter (the same stream on every platform)."""

    def __init__(self, seed):
        self.s = seed & MASK

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def uniform(self):
        return (self.next() >> 11) * (1.0 / 9007199254740992.0)

    def below(self, n):
        return self.next() % n


def mix(a, b):
    return Rng(((a * 0x2545F4914F6CDD1D) & MASK) ^ b).next()


COLOURS = [("red", 220, 40, 40), ("green", 40, 180, 60), ("blue", 40, 70, 220), ("yellow", 230, 210, 40),
           ("purple", 150, 60, 190), ("orange", 240, 140, 30), ("white", 240, 240, 240), ("black", 20, 20, 20)]
SHAPES = ["circle", "square", "diamond", "ring"]
SIZES = ["small", "medium", "large"]


def random_scene(r):
    fg = r.below(8)
    bg = r.below(8)
    while bg == fg:
        bg = r.below(8)
    shape, size = r.below(4), r.below(3)
    cx, cy = 0.3 + 0.4 * r.uniform(), 0.3 + 0.4 * r.uniform()
    return {"fg": fg, "bg": bg, "shape": shape, "size": size, "cx": cx, "cy": cy}


def draw(s, n):
    """[n, n, 3] uint8: the shape over a soft background gradient."""
    fg, bg = np.array(COLOURS[s["fg"]][1:], np.float64), np.array(COLOURS[s["bg"]][1:], np.float64)
    radius = (0.12 + 0.08 * s["size"]) * n
    y, x = np.mgrid[0:n, 0:n].astype(np.float64)
    shade = 0.75 + 0.25 * ((x + y) / (2.0 * n))
    ux, uy = x + 0.5 - s["cx"] * n, y + 0.5 - s["cy"] * n
    if s["shape"] == 0:
        inside = ux * ux + uy * uy <= radius * radius
    elif s["shape"] == 1:
        inside = (np.abs(ux) <= radius) & (np.abs(uy) <= radius)
    elif s["shape"] == 2:
        inside = np.abs(ux) + np.abs(uy) <= radius * 1.3
    else:
        d = np.sqrt(ux * ux + uy * uy)
        inside = (d <= radius) & (d >= radius * 0.55)
    px = (bg[None, None, :] * shade[:, :, None]).astype(np.uint8)
    px[inside] = fg.astype(np.uint8)
    return px


def spec_string(images, size, seed):
    return f"python_train data v1 images={images} size={size} seed={seed}\n"


def ensure_data(directory, images=64, size=256, seed=1):
    """Writes DIR/images/iNNNNN.{jpg,txt} unless DIR already holds this spec's data (DIR/DATASET records it).
    Returns True when it generated the files."""
    import jitembed
    marker = os.path.join(directory, "DATASET")
    spec = spec_string(images, size, seed)
    if os.path.isfile(marker) and open(marker).read() == spec:
        return False
    os.makedirs(os.path.join(directory, "images"), exist_ok=True)
    r = Rng(mix(seed, 0x696D616765))
    for i in range(images):
        s = random_scene(r)
        jpeg = jitembed.encode_jpeg(np.ascontiguousarray(draw(s, size)), quality=90)
        stem = os.path.join(directory, "images", f"i{i:05d}")
        with open(stem + ".jpg", "wb") as f:
            f.write(jpeg)
        with open(stem + ".txt", "w") as f:
            f.write(f"a {SIZES[s['size']]} {COLOURS[s['fg']][0]} {SHAPES[s['shape']]} on a {COLOURS[s['bg']][0]} background")
    with open(marker, "w") as f:
        f.write(spec)
    return True
