"""The GIL is released around long calls: a Python thread keeps counting while the main thread is inside
a long JPEG decode and inside Loader.__next__ (a thread that needs the GIL could not count otherwise)."""
import threading

import numpy as np
import pytest

import jitembed


class Counter:
    """Counts in a Python loop that gives the GIL up between increments (time.sleep(0)), so the main thread
    gets it back at once after a call; while the main thread holds the GIL the count cannot move."""

    def __init__(self):
        self.n = 0
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        import time
        while not self.stop:
            self.n += 1
            time.sleep(0)

    def __enter__(self):
        self.thread.start()
        while self.n == 0:  # running
            threading.Event().wait(0.001)
        return self

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join()


def counted(fn):
    with Counter() as c:
        before = c.n
        out = fn()
        during = c.n - before
    return out, during


@pytest.fixture(scope="module")
def big_jpeg():
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:2048, 0:2048]
    img = ((x[..., None] + y[..., None] * 2 + rng.integers(0, 64, (2048, 2048, 3))) % 256).astype(np.uint8)
    return jitembed.encode_jpeg(img, quality=95, subsampling="444")


def test_gil_released_during_decode(big_jpeg):
    img, during = counted(lambda: jitembed.decode_jpeg(big_jpeg))
    assert img.shape == (2048, 2048, 3)
    # the decode takes tens of milliseconds; a thread that waited for the GIL would count at most a couple
    assert during > 20, during


def test_gil_released_during_loader_next(tmp_path):
    path = str(tmp_path / "gil.jems")
    with jitembed.ShardWriter.create(path) as w:
        for i in range(4):
            b = jitembed.RecordBuilder()
            b.add_text("caption", f"caption {i}")
            w.append(b, key=str(i))
    # every batch of the model sleeps 300 ms: the first step is not ready for at least that long
    with jitembed.Client(local_models=["text-embed:text_dim=8,text_max_length=8,sleep_us=300000"], local_threads=1) as c:
        loader = jitembed.Loader(path, c, [("t", "text-embed", "text")], batch_size=4, samples_per_request=4,
                                 requests_in_flight=1, workers=1, shuffle=False)
        batch, during = counted(lambda: next(loader))
        assert len(batch["ids"]) == 4
        assert during > 20, during
        loader.close()
