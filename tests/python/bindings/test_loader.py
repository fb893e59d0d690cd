"""Loader from Python: every sample exactly once per epoch (failed ones reported, not dropped), values equal
to the client's own answers, remote and local, with a cache."""
import numpy as np
import pytest

import jitembed

TEXT = "text-embed:text_dim=16,text_max_length=8"


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory, jpeg_bytes):
    path = str(tmp_path_factory.mktemp("loader") / "data.jems")
    with jitembed.ShardWriter.create(path) as w:
        for i in range(23):
            b = jitembed.RecordBuilder()
            b.add_text("caption", f"caption of sample {i}")
            if i % 4 == 0:
                b.add_image("image", jpeg_bytes if i != 8 else b"\xff\xd8 not really a jpeg")
            w.append(b, key=f"{i:03d}")
    return path


def all_ids(n=23):
    return sorted(f"data.jems#{i:03d}" for i in range(n))


def run_epoch(loader):
    ids, failed, batches = [], [], []
    for batch in loader:
        ids += batch["ids"]
        failed += batch["failed"]
        batches.append(batch)
    return ids, failed, batches


def test_every_sample_once_per_epoch(dataset_path):
    with jitembed.Client(local_models=[TEXT], local_threads=1) as client:
        loader = jitembed.Loader(dataset_path, client, [("caption", "text-embed", "text", "pooled")], batch_size=5,
                                 samples_per_request=4, requests_in_flight=2, workers=1, seed=3)
        assert loader.steps_per_epoch == 5 and loader.samples_per_epoch == 23
        for epoch in range(2):
            ids, failed, batches = run_epoch(loader)
            assert sorted(ids) == all_ids() and failed == []
            assert [b["epoch"] for b in batches] == [epoch] * 5
            for b in batches:
                assert b["caption"].shape == (len(b["ids"]), 16) and b["caption"].dtype == np.float32
                assert list(b["indices"]) == [int(i.split("#")[1]) for i in b["ids"]]
        # a step's rows are what the client computes for those samples
        ds = jitembed.Dataset.open(dataset_path)
        b = batches[0]
        want = client.embed("text-embed", [ds[int(i)].record for i in b["indices"]], outputs=["pooled"])
        assert b["caption"].tobytes() == want["pooled"].tobytes()
        st = loader.stats()
        assert st["samples_delivered"] == 46
        e0, e1 = st["epochs"][0], st["epochs"][1]
        assert (e0["epoch"], e1["epoch"]) == (0, 1)
        for e in (e0, e1):
            assert e["ended"] and e["steps"] == 5 and e["samples_delivered"] == 23 and e["samples_failed"] == 0
            assert e["wall_s"] > 0 and 0 <= e["stall"] <= 1 and e["samples_per_s"] > 0
            assert e["rows_requested"] == 23  # no cache: every sample asked once per epoch
        assert sum(e["requests"] for e in st["epochs"]) == st["requests"]
        loader.close()


def test_remote_loader_with_cache_and_failures(dataset_path):
    with jitembed.Server(models=[TEXT, "image-latent:image_bucket=32"], preprocess_threads=1) as srv, \
            jitembed.Client(endpoints=[f"http://{srv.url}"]) as client:
        cache = jitembed.MemoryCache(1 << 24)
        specs = [{"name": "caption", "model": "text-embed", "kind": "text", "output": "pooled"},
                 {"name": "latent", "model": "image-latent", "kind": "image"}]
        loader = jitembed.Loader(jitembed.Dataset.open(dataset_path), client, specs, batch_size=8, shuffle=False,
                                 cache=cache, workers=1)
        ids, failed, batches = run_epoch(loader)
        # sample 8's image is not a JPEG: it is delivered once, failed, with the errc of the model's decode
        assert [f["id"] for f in failed] == ["data.jems#008"]
        assert isinstance(jitembed.error_class(failed[0]["errc"])("x"), ValueError)
        assert sorted(ids + [f["id"] for f in failed]) == all_ids()
        for b in batches:
            # only samples with an image get a latent: a list with None for the others
            lat = b["latent"]
            assert isinstance(lat, list) and len(lat) == len(b["ids"])
            for sid, row in zip(b["ids"], lat):
                assert (row is None) == (int(sid.split("#")[1]) % 4 != 0)
        first = {sid: row for b in batches for sid, row in zip(b["ids"], b["caption"])}
        ids2, failed2, batches2 = run_epoch(loader)  # epoch 2: from the cache
        assert sorted(ids2) == sorted(ids) and len(failed2) == 1
        st = loader.stats()
        assert st["cache_hits"] >= 22 and st["cache_puts"] >= 22
        for b in batches2:
            for sid, row in zip(b["ids"], b["caption"]):
                assert row.tobytes() == first[sid].tobytes()
        loader.close()
        with pytest.raises(jitembed.CancelledError):
            next(loader)


def test_resume_delivers_exactly_the_rest(dataset_path):
    spec = [("caption", "text-embed", "text", "pooled")]
    with jitembed.Client(local_models=[TEXT], local_threads=1) as client:
        first = jitembed.Loader(dataset_path, client, spec, batch_size=5, seed=11, workers=1)
        seen = []
        for _ in range(2):
            seen += next(first)["ids"]
        state = first.state()
        first.close()
        assert isinstance(state, bytes) and len(seen) == 10
        rest = jitembed.Loader(dataset_path, client, spec, batch_size=5, seed=11, workers=1, resume=state)
        ids, failed, _ = run_epoch(rest)
        assert failed == [] and sorted(seen + ids) == all_ids()
        rest.close()
        with pytest.raises(jitembed.Error):  # a state that does not fit this data set / options
            jitembed.Loader(dataset_path, client, spec, batch_size=4, seed=11, resume=state)


def test_field_spec_over_a_tensor_field(tmp_path):
    """A spec with 'field': a tensor field of token ids (int32 [L], the caption's byte codes: text-embed's declared
    input 'tokens') as typed rows equals the caption spec, sample for sample; ids of different lengths go in
    requests of their own; the second epoch comes from the cache."""
    path = str(tmp_path / "ids.jems")
    with jitembed.ShardWriter.create(path) as w:
        for i in range(9):
            caption = f"caption {i}" + "!" * (i % 3)  # three lengths
            b = jitembed.RecordBuilder()
            b.add_text("caption", caption)
            b.add_tensor("tokens", np.frombuffer(caption.encode(), np.uint8).astype(np.int32))
            w.append(b, key=f"{i:02d}")
    specs = [{"name": "by_text", "model": "text-embed", "kind": "text", "output": "pooled"},
             {"name": "by_ids", "model": "text-embed", "field": "tokens", "input": "tokens", "output": "pooled"}]
    with jitembed.Client(local_models=["text-embed:text_dim=16,text_max_length=16"], local_threads=1) as client:
        loader = jitembed.Loader(path, client, specs, batch_size=9, samples_per_request=9, shuffle=False, workers=1,
                                 cache=jitembed.MemoryCache(1 << 20))
        for epoch in range(2):
            (step,) = list(loader)
            assert step["failed"] == [] and len(step["ids"]) == 9
            assert step["by_ids"].tobytes() == step["by_text"].tobytes()
        stats = loader.stats()
        assert stats["epochs"][0]["requests"] == 1 + 3  # the captions in one request, the ids in one per length
        assert stats["epochs"][1]["requests"] == 0 and stats["epochs"][1]["cache_hits"] == 18
        loader.close()
