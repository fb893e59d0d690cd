"""The replicas' health probe without Ray: a one-row inference through jitembed.Server with a deadline."""

from __future__ import annotations

import threading
import time

import pytest

import jitembed
from jitembed.ray.deployment import probe


def test_probe_passes_on_a_serving_model_and_fails_past_its_deadline():
    with jitembed.Server(models=["text-embed:text_dim=16,text_max_length=16", "image-latent:image_bucket=32"],
                         host="127.0.0.1", port=0, io_threads=1, preprocess_threads=1) as srv:
        probe(srv, "text-embed")
        probe(srv, "image-latent")  # the built-in 16x16 JPEG row
        with pytest.raises(RuntimeError, match="'nope' metadata answered 404"):
            probe(srv, "nope")
        with pytest.raises(RuntimeError, match="answered 400"):
            probe(srv, "image-latent", row=b"not a jpeg")
        # A model that cannot answer within the deadline (1.5 s per batch, 200 ms deadline): the idle model
        # starts the row at once and it runs past the deadline: answered 504 at the deadline, and the model
        # reports not ready until the batch returns; queued behind a running batch (batches of 1) a row is
        # dropped at its deadline (504).
        srv.load("text-embed", version="2", spec="text-embed:text_dim=16,text_max_length=16,sleep_us=1500000,max_batch_size=1")
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match=r"answered 504: .*while model .*text-embed.* ran"):
            probe(srv, "text-embed", deadline_ms=200)
        assert time.monotonic() - t0 < 1.2
        assert srv.status()["text-embed:2"]["ready"] is False
        end = time.monotonic() + 5
        while not srv.status()["text-embed:2"]["ready"] and time.monotonic() < end:
            time.sleep(0.01)
        assert srv.status()["text-embed:2"]["ready"] is True
        busy = threading.Thread(target=probe, args=(srv, "text-embed"), kwargs={"deadline_ms": 5000})
        busy.start()
        end = time.monotonic() + 10  # wait until its row runs (admitted), so the next one queues behind it
        while sum(m["inflight_rows"] for m in srv.stats().values()) == 0 and time.monotonic() < end:
            time.sleep(0.005)
        try:
            with pytest.raises(RuntimeError, match="answered 504"):
                probe(srv, "text-embed", deadline_ms=200)
        finally:
            busy.join()
