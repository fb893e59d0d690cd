"""jitembed.torch.Loader: zero-copy tensors (addresses), pin_memory, failed rows left out, two ranks (torchrun or
two processes on gloo) with disjoint samples and equal step counts, resume from state_dict mid-epoch (also
through torchdata's StatefulDataLoader when installed), set_epoch, and use inside torch's DataLoader."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jitembed

torch = pytest.importorskip("torch")
jt = pytest.importorskip("jitembed.torch")

TEXT = "text-embed:text_dim=16,text_max_length=8"
CAPTION = [("caption", "text-embed", "text", "pooled")]
N = 21


def write_dataset(path, n, bad=(), jpeg=None):
    with jitembed.ShardWriter.create(str(path)) as w:
        for i in range(n):
            b = jitembed.RecordBuilder()
            b.add_text("caption", f"caption of sample {i}")
            if jpeg is not None:
                b.add_image("image", jpeg if i not in bad else b"\xff\xd8 not really a jpeg")
            w.append(b, key=f"{i:03d}")
    return str(path)


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("torch_loader") / "data.jems", N)


@pytest.fixture(scope="module")
def client():
    with jitembed.Client(local_models=[TEXT, "image-latent:image_bucket=32"], local_threads=1) as c:
        yield c


def all_ids(n=N):
    return sorted(f"data.jems#{i:03d}" for i in range(n))


def address(a):
    return a.__array_interface__["data"][0]


class Spy:
    """Stands in for the wrapped jitembed.Loader and keeps the numpy steps it hands out."""

    def __init__(self, inner):
        self.inner, self.raw = inner, []

    def __next__(self):
        r = next(self.inner)
        self.raw.append(r)
        return r

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_import_jitembed_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import jitembed; assert jitembed.Loader\n"
            "try:\n    import jitembed.torch\nexcept ImportError:\n    print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_steps_are_zero_copy_tensors(dataset_path, client):
    with jt.Loader(dataset_path, client, CAPTION, batch_size=4, workers=1, seed=1, rank=0, world_size=1) as ds:
        assert len(ds) == 6 and ds.samples_per_epoch == N
        spy = Spy(ds._loader)
        ds._loader = spy
        steps = list(ds)
        assert len(steps) == 6 and len(spy.raw) == 6
        for s, raw in zip(steps, spy.raw):
            t = s["caption"]
            assert isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.shape == (len(s["ids"]), 16)
            # the tensor is the C++ collate's buffer: the numpy array's address, no copy
            assert t.data_ptr() == address(raw["caption"]) == jitembed._address(raw["caption"])
            assert s["indices"].dtype == torch.int64 and s["indices"].data_ptr() == address(raw["indices"])
            assert s["indices"].tolist() == [int(i.split("#")[1]) for i in s["ids"]]
            assert s["failed"] == [] and s["epoch"] == 0 and not t.is_pinned()
        assert [s["step"] for s in steps] == list(range(6))
        assert sorted(i for s in steps for i in s["ids"]) == all_ids()
        # the values are the client's answers for those samples
        data = jitembed.Dataset.open(dataset_path)
        want = client.embed("text-embed", [data[int(i)].record for i in steps[0]["indices"]], outputs=["pooled"])
        assert steps[0]["caption"].numpy().tobytes() == want["pooled"].tobytes()
    # to_torch alone, on a jitembed.Loader step
    with jitembed.Loader(dataset_path, client, CAPTION, batch_size=4, workers=1) as np_loader:
        raw = next(np_loader)
        s = jt.to_torch(raw)
        assert s["caption"].data_ptr() == address(raw["caption"]) and s["ids"] == raw["ids"]


def test_bf16_embeddings_are_bfloat16_tensors(dataset_path):
    """A bf16 model's embeddings: jitembed.Loader gives uint16 arrays of the bits and names the dtype; the torch
    loader views them as torch.bfloat16 without a copy."""
    with jitembed.Client(local_models=[TEXT + ",output_dtype=bf16"], local_threads=1) as c:
        with jitembed.Loader(dataset_path, c, CAPTION, batch_size=4, workers=1, seed=1) as np_loader:
            raw = next(np_loader)
            assert raw["dtypes"] == {"caption": "bf16"} and raw["caption"].dtype == np.uint16
        with jt.Loader(dataset_path, c, CAPTION, batch_size=4, workers=1, seed=1, rank=0, world_size=1) as ds:
            spy = Spy(ds._loader)
            ds._loader = spy
            s = next(iter(ds))
            t = s["caption"]
            assert t.dtype == torch.bfloat16 and t.shape == (4, 16) and "dtypes" not in s
            assert t.data_ptr() == address(spy.raw[0]["caption"])  # a view of the step's buffer
            np.testing.assert_array_equal(t.view(torch.uint16).numpy(), raw["caption"])  # the same bits
            assert torch.isfinite(t.float()).all()


def test_device_cpu_is_a_no_op(dataset_path, client):
    with jt.Loader(dataset_path, client, CAPTION, batch_size=8, workers=1, device="cpu", world_size=1, rank=0) as ds:
        assert ds.device is None
        spy = Spy(ds._loader)
        ds._loader = spy
        for s, raw in zip(ds, spy.raw):
            assert s["caption"].device.type == "cpu" and s["caption"].data_ptr() == address(raw["caption"])


def test_pin_memory(dataset_path, client):
    available = torch.accelerator.is_available()
    if not available:
        # torch itself raises here (pin_memory needs an accelerator): the loader warns, as DataLoader does, and
        # hands out the unpinned zero-copy tensors
        with pytest.raises(RuntimeError):
            torch.zeros(1).pin_memory()
        with pytest.warns(UserWarning, match="no accelerator"):
            ds = jt.Loader(dataset_path, client, CAPTION, batch_size=8, workers=1, pin_memory=True, world_size=1, rank=0)
        assert ds.pin_memory is False
        s = next(iter(ds))
        assert not s["caption"].is_pinned() and s["caption"].shape == (8, 16)
        ds.close()
        return
    with jt.Loader(dataset_path, client, CAPTION, batch_size=8, workers=1, pin_memory=True, world_size=1, rank=0) as ds:
        spy = Spy(ds._loader)
        ds._loader = spy
        s = next(iter(ds))
        raw = spy.raw[0]
        assert s["caption"].is_pinned() and s["caption"].data_ptr() != address(raw["caption"])  # the one copy
        assert s["caption"].numpy().tobytes() == raw["caption"].tobytes()


def test_failed_rows_are_left_out(tmp_path, client, jpeg_bytes):
    bad = {3, 10, 11}
    path = write_dataset(tmp_path / "data.jems", 14, bad=bad, jpeg=jpeg_bytes)
    specs = [("caption", "text-embed", "text", "pooled"), ("latent", "image-latent", "image")]
    with jt.Loader(path, client, specs, batch_size=4, shuffle=False, workers=1, world_size=1, rank=0) as ds:
        steps = list(ds)
    assert len(steps) == 4
    failed = [f for s in steps for f in s["failed"]]
    assert sorted(f["index"] for f in failed) == sorted(bad)
    assert all(isinstance(jitembed.error_class(f["errc"])("x"), ValueError) for f in failed)
    ok = [i for s in steps for i in s["indices"].tolist()]
    assert sorted(ok) == sorted(set(range(14)) - bad)
    step2 = steps[2]  # samples 8..11: 10 and 11 failed, their rows are not there (no zero rows)
    assert step2["indices"].tolist() == [8, 9] and [f["index"] for f in step2["failed"]] == [10, 11]
    for s in steps:
        n = len(s["ids"])
        assert s["caption"].shape == (n, 16) and s["latent"].shape[0] == n and s["latent"].dtype == torch.float32
    data = jitembed.Dataset.open(path)
    want = client.embed("image-latent", [data[i].record for i in (8, 9)])
    assert step2["latent"].numpy().tobytes() == next(iter(want.outputs.values())).tobytes()


def test_ranks_from_arguments_and_environment(dataset_path, client, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert jt.dist_rank() == (1, 3)
    assert jt.dist_rank(rank=2) == (2, 3) and jt.dist_rank(world_size=2) == (1, 2)
    with pytest.raises(ValueError, match="rank 3 is not in"):
        jt.dist_rank(rank=3)
    with jt.Loader(dataset_path, client, CAPTION, batch_size=4, workers=1) as ds:
        assert (ds.rank, ds.world_size) == (1, 3) and ds.samples_per_epoch == 7 and len(ds) == 2
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert jt.dist_rank() == (0, 1)


RANK_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import torch.distributed as dist
    import jitembed, jitembed.torch
    dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=60))
    path, out = sys.argv[1], sys.argv[2]
    with jitembed.Client(local_models=["text-embed:text_dim=16,text_max_length=8"], local_threads=1) as c, \\
            jitembed.torch.Loader(path, c, [("caption", "text-embed", "text", "pooled")], batch_size=5, seed=7,
                                  workers=1) as ds:
        steps = [{"ids": s["ids"], "shape": list(s["caption"].shape), "step": s["step"]} for s in ds]
        r = {"rank": ds.rank, "world": ds.world_size, "len": len(ds), "steps": steps}
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out, f"rank{r['rank']}.json"), "w") as f:
        json.dump(r, f)
""")


def test_two_ranks_disjoint_and_equal_steps(dataset_path, tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(pathlib.Path(jitembed.__file__).parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    torchrun = shutil.which("torchrun", path=str(pathlib.Path(sys.executable).parent))
    if torchrun:
        cmd = [torchrun, "--nproc_per_node", "2", "--standalone", str(script), dataset_path, str(tmp_path)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90)
        assert out.returncode == 0, out.stdout + out.stderr
    else:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = [subprocess.Popen([sys.executable, str(script), dataset_path, str(tmp_path)],
                                  env=dict(env, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
                 for r in range(2)]
        try:
            assert [p.wait(timeout=90) for p in procs] == [0, 0]
        finally:
            for p in procs:
                p.kill()
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    assert (r0["rank"], r0["world"], r1["rank"], r1["world"]) == (0, 2, 1, 2)
    # 21 samples over 2 ranks: 11 and 10; 3 steps of 5 on both ranks (rank 1's last step is empty)
    assert r0["len"] == r1["len"] == 3 and len(r0["steps"]) == len(r1["steps"]) == 3
    assert [len(s["ids"]) for s in r0["steps"]] == [5, 5, 1] and [len(s["ids"]) for s in r1["steps"]] == [5, 5, 0]
    assert r1["steps"][2]["shape"] == [0, 16]  # an empty step still has a [0, D] tensor
    ids0 = [i for s in r0["steps"] for i in s["ids"]]
    ids1 = [i for s in r1["steps"] for i in s["ids"]]
    assert not set(ids0) & set(ids1) and sorted(ids0 + ids1) == all_ids()


def run_rest(ds):
    return [i for s in ds for i in s["ids"]]


def test_resume_from_state_dict_mid_epoch(dataset_path, client):
    kw = dict(batch_size=4, seed=5, workers=1, rank=0, world_size=1)
    first = jt.Loader(dataset_path, client, CAPTION, **kw)
    it = iter(first)
    seen = [i for _ in range(2) for i in next(it)["ids"]]
    sd = first.state_dict()
    first.close()
    assert len(seen) == 8 and isinstance(sd["loader"], bytes)
    buf = __import__("io").BytesIO()
    torch.save(sd, buf)  # what a trainer's checkpoint does with it
    buf.seek(0)
    sd = torch.load(buf)
    second = jt.Loader(dataset_path, client, CAPTION, **kw)
    second.load_state_dict(sd)
    second.set_epoch(0)  # the training loop's set_epoch for the resumed epoch keeps the checkpoint
    rest = run_rest(second)
    assert sorted(seen + rest) == all_ids() and len(seen + rest) == N  # every sample exactly once
    assert sorted(run_rest(second)) == all_ids() and second.epoch == 2  # then the next epoch, whole
    with pytest.raises(jitembed.Error):  # a state of another batch size
        jt.Loader(dataset_path, client, CAPTION, **dict(kw, batch_size=3)).load_state_dict(sd)
    with pytest.raises(ValueError):
        second.load_state_dict({"loader": b"nonsense"})
    second.close()


def test_lookahead_bookkeeping(dataset_path, client):
    """With device='cuda' the loader fetches (and copies) one step ahead; its bookkeeping (the checkpoint of what
    was handed out, a pass left early, set_epoch at an epoch's end) checked here on host tensors."""
    kw = dict(batch_size=4, seed=4, workers=1, rank=0, world_size=1)
    with jitembed.Loader(dataset_path, client, CAPTION, **kw) as ref:
        want = [[s["ids"] for s in ref] for _ in range(3)]  # epochs 0, 1, 2
    ds = jt.Loader(dataset_path, client, CAPTION, **kw)
    ds._lookahead = True
    got = []
    for s in ds:
        got.append(s["ids"])
        if len(got) == 2:
            break
    sd = ds.state_dict()  # step 2 was fetched ahead: the checkpoint is the one after step 1
    assert ds.epoch == 0
    got += [s["ids"] for s in ds]  # the next pass starts with the step fetched ahead
    assert got == want[0]
    other = jt.Loader(dataset_path, client, CAPTION, **kw)
    other._lookahead = True
    other.load_state_dict(sd)
    assert [s["ids"] for s in other] == want[0][2:]
    assert [s["ids"] for s in other] == want[1]
    other.close()
    it = iter(ds)  # epoch 1, left after its last step (the epoch's end was fetched ahead)
    assert [next(it)["ids"] for _ in range(len(ds))] == want[1]
    assert ds.state_dict()["loader"] != sd["loader"]
    ds.set_epoch(2)  # the loader already stands at epoch 2: kept, nothing lost
    assert [s["ids"] for s in ds] == want[2]
    ds.close()


def test_cuda_prefetch_order_with_stand_ins(dataset_path, client, monkeypatch):
    """The CUDA path's order of operations, with stand-ins for streams, events and the copy (meta tensors), as
    there is no GPU here: step k+1's copies are issued non-blocking on the side stream and its event recorded
    there before step k is handed out; the consumer's stream waits on step k's event and each of step k's
    tensors is record_stream-ed on it."""
    log = []

    class Stream:
        def __init__(self, name):
            self.name = name

        def wait_event(self, e):
            log.append(("wait", self.name, e.id))

    class Event:
        made = 0

        def __init__(self):
            Event.made += 1
            self.id = Event.made

        def record(self, stream):
            log.append(("record", stream.name, self.id))

    side, consumer, current = Stream("side"), Stream("consumer"), []

    class StreamContext:
        def __init__(self, s):
            self.s = s

        def __enter__(self):
            current.append(self.s)

        def __exit__(self, *exc):
            current.pop()

    to = torch.Tensor.to
    monkeypatch.setattr(torch.cuda, "stream", StreamContext)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: consumer)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda t, s: log.append(("record_stream", s.name, t.shape[0])))
    monkeypatch.setattr(torch.Tensor, "to", lambda t, dev, non_blocking=False: (
        log.append(("copy", current[-1].name if current else None, non_blocking, t.shape[0])), to(t, "meta"))[1])
    with jt.Loader(dataset_path, client, CAPTION, batch_size=8, workers=1, rank=0, world_size=1) as ds:
        ds.device, ds._copy_stream, ds._lookahead = torch.device("cuda"), side, True
        sizes = []
        for k, s in enumerate(ds):
            assert s["caption"].device.type == "meta" and "_event" not in s
            sizes.append(s["caption"].shape[0])
            event_k = k + 1  # events are made in step order
            mine = log.index(("wait", "consumer", event_k))
            # step k's copy on the side stream and its event, then step k+1's (fetched ahead), then the wait
            assert log[:mine].count(("record", "side", event_k)) == 1
            copies = [e for e in log[:mine] if e[0] == "copy"]
            assert all(e[1] == "side" and e[2] is True for e in copies)
            assert len(copies) == min(k + 2, 3)  # 21 samples: 3 steps
            assert log[mine + 1] == ("record_stream", "consumer", sizes[-1])
        assert sizes == [8, 8, 5] and ("record", "side", 4) not in log  # no event for the epoch's end


def test_set_epoch_matches_the_epoch_plan(dataset_path, client):
    kw = dict(batch_size=4, seed=9, workers=1, rank=0, world_size=1)
    with jt.Loader(dataset_path, client, CAPTION, **kw) as ds, \
            jitembed.Loader(dataset_path, client, CAPTION, epoch=3, **kw) as ref:
        ds.set_epoch(3)
        steps = list(ds)
        assert {s["epoch"] for s in steps} == {3}
        assert [s["ids"] for s in steps] == [r["ids"] for r in ref]
        assert ds.epoch == 4


def test_inside_dataloader(dataset_path, client):
    with jt.Loader(dataset_path, client, CAPTION, batch_size=4, workers=1, rank=0, world_size=1) as ds:
        spy = Spy(ds._loader)
        ds._loader = spy
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
        assert len(dl) == 6
        for epoch in range(2):
            steps = list(dl)
            assert len(steps) == 6 and {s["epoch"] for s in steps} == {epoch}
            assert sorted(i for s in steps for i in s["ids"]) == all_ids()
        assert all(s["caption"].data_ptr() == address(r["caption"]) for s, r in zip(steps, spy.raw[6:]))
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0, collate_fn=jt.as_is)
        steps = list(dl)
        assert sorted(i for s in steps for i in s["ids"]) == all_ids() and {s["epoch"] for s in steps} == {2}
    with pytest.raises(TypeError, match="cannot be pickled"):
        __import__("pickle").dumps(ds)


def test_stateful_dataloader_resume(dataset_path, client):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    kw = dict(batch_size=4, seed=2, workers=1, rank=0, world_size=1)
    with jt.Loader(dataset_path, client, CAPTION, **kw) as ds:
        dl = sdl.StatefulDataLoader(ds, batch_size=None, num_workers=0)
        it = iter(dl)
        seen = [i for _ in range(3) for i in next(it)["ids"]]
        sd = dl.state_dict()
    with jt.Loader(dataset_path, client, CAPTION, **kw) as ds2:
        dl2 = sdl.StatefulDataLoader(ds2, batch_size=None, num_workers=0)
        dl2.load_state_dict(sd)
        rest = [i for s in dl2 for i in s["ids"]]
        assert len(seen) == 12 and sorted(seen + rest) == all_ids()
        assert sorted(i for s in dl2 for i in s["ids"]) == all_ids()  # the next epoch, whole
