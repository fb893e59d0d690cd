"""jitembed.ray.hybrid on a local Ray cluster (127.0.0.1): hybrid_parallel's model trained with one actor group
per module, checked against the same training run as plain processes (hybrid_parallel --procs), a restart
after ray.kill of an actor, collocated placement with uneven groups, and configs refused before any actor."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import eventually
from jitembed.ray import hybrid
from jitembed.ray.hybrid import HybridConfig, HybridConfigError

STEPS = 20


@pytest.fixture(scope="module")
def hybrid_bin() -> str:
    path = os.environ.get(hybrid.BINARY_ENV)
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"{hybrid.BINARY_ENV} is not set to a built hybrid_parallel (run through ctest, label ray)")
    return path


def config(exe: str, **kw) -> HybridConfig:
    d = {"world": 4, "encoder": {"ranks": [0, 1], "num_cpus": 0.5}, "llm": {"ranks": [2, 3], "num_cpus": 0.5},
         "steps": STEPS, "binary": exe, "timeout_s": 120, "start_timeout_s": 60}
    d.update(kw)
    return HybridConfig.from_dict(d)


def procs_losses(binary: str, args) -> list:
    """The same training as plain processes (hybrid_parallel --procs): its JSON line's losses."""
    out = subprocess.run([binary, "--procs", "--timeout", "60", *args], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return json.loads([l for l in out.stdout.splitlines() if l.startswith("{")][-1])["losses"]


def rank_processes(binary: str) -> list:
    """Pids of hybrid_parallel --events processes still alive (from /proc)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0] == binary.encode() and b"--events" in argv:
            pids.append(int(pid))
    return pids


@pytest.fixture(scope="module")
def uninterrupted(ray_cluster, hybrid_bin, tmp_path_factory):
    lines = []
    s = hybrid.train(config(hybrid_bin, checkpoint_dir=str(tmp_path_factory.mktemp("ck_plain")), checkpoint_every=5),
                     log=lines.append)
    return s, lines


def test_disjoint_2_plus_2_trains_and_equals_processes(uninterrupted, hybrid_bin):
    s, lines = uninterrupted
    assert s["restarts"] == 0 and s["resumed_from"] == 0
    losses = s["losses"]
    assert len(losses) == STEPS
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 and losses[-1] < losses[0], losses  # the loss falls
    # bitwise the training hybrid_parallel --procs runs on the same layout
    assert losses == procs_losses(hybrid_bin, ["--encoder-ranks", "0,1", "--llm-ranks", "2,3", "--steps", str(STEPS)])
    assert [p["step"] for p in s["per_step"]] == list(range(1, STEPS + 1))
    assert [p["loss"] for p in s["per_step"]] == losses
    assert sum(l.startswith("hybrid: step ") for l in lines) == STEPS and lines[-1].startswith("hybrid: 20 steps")
    assert s["tokens_per_step"] == 2 * (8 + 8) and s["tokens_per_s"] > 0
    assert all(s["peak_bytes"][m] > 0 for m in ("encoder", "llm", "boundary")), s["peak_bytes"]
    # boundary per step: each LM rank gets the encoder output B*S*H_e*4 = 2048 bytes; each encoder rank its
    # chunk of the gradient back (1024): the formula of hybrid_parallel's byte table
    assert s["boundary_bytes_per_step"] == 2 * 2048 + 2 * 1024
    actors = [a for g in s["groups"].values() for a in g["actors"]]
    assert len({a["pid"] for a in actors}) == 4 and all(a["node"] == "127.0.0.1" for a in actors)
    assert rank_processes(hybrid_bin) == []


def test_killed_actor_restarts_from_checkpoint(uninterrupted, hybrid_bin, tmp_path):
    import ray

    killed = []

    def on_step(p, run):
        # pause_at_step holds every rank after step 7 (its checkpoint, every 5 steps: step 5, is complete)
        if p["step"] == 7 and run.restarts == 0:
            ray.kill(run.actors[3], no_restart=True)
            killed.append(p["step"])

    s = hybrid.train(config(hybrid_bin, checkpoint_dir=str(tmp_path / "ck"), checkpoint_every=5, max_restarts=1,
                            pause_at_step=7), on_step=on_step, log=lambda _: None)
    assert killed == [7]
    assert s["restarts"] == 1 and s["resumed_from"] == 5
    assert "the actor of rank 3 (llm) died" in s["failures"][0], s["failures"]
    assert s["step_runs"] == STEPS + 2  # steps 6 and 7 ran twice
    plain = uninterrupted[0]
    assert s["losses"] == plain["losses"]  # bitwise: the resume restores parameters and AdamW state exactly
    assert s["digests"] == plain["digests"]  # and every rank's final parameters
    eventually(lambda: rank_processes(hybrid_bin) == [], 10, "every rank gone with its actor")


def test_no_restart_left_fails_with_the_cause(ray_cluster, hybrid_bin, tmp_path):
    import ray

    def on_step(p, run):
        if p["step"] == 2:
            ray.kill(run.actors[0], no_restart=True)

    with pytest.raises(hybrid.HybridRunError, match=r"the actor of rank 0 \(encoder\) died.*\(restarts: 0 of 0\)"):
        hybrid.train(config(hybrid_bin, steps=4, pause_at_step=2), on_step=on_step, log=lambda _: None)
    eventually(lambda: rank_processes(hybrid_bin) == [], 10, "every rank gone with its actor")


def test_collocated_uneven_groups(ray_cluster, hybrid_bin):
    # world 6: encoder SP=4 on 0..3, LM TP=2 on 4,5; one placement group of 4 bundles, bundles 0 and 1 each
    # holding an encoder and an LM actor (fractions of the cluster's one logical GPU)
    c = config(hybrid_bin, world=6, placement="collocated", steps=3,
               encoder={"ranks": [0, 1, 2, 3], "num_cpus": 0.5, "num_gpus": 0.125},
               llm={"ranks": [4, 5], "num_cpus": 0.5, "num_gpus": 0.25})
    assert c.bundles() == [{"name": "collocated", "modules": ["encoder", "llm"],
                            "bundles": [{"CPU": 1.0, "GPU": 0.375}] * 2 + [{"CPU": 0.5, "GPU": 0.125}] * 2}]
    s = hybrid.train(c, log=lambda _: None)
    assert s["losses"] == procs_losses(hybrid_bin, ["--world", "6", "--encoder-ranks", "0,1,2,3", "--llm-ranks", "4,5",
                                                    "--steps", "3"])
    assert all(a["gpu_ids"] == ["0"] for g in s["groups"].values() for a in g["actors"])


@pytest.mark.parametrize("change, message", [
    ({"llm": {"ranks": [1, 2, 3]}}, "rank 1 is in both the encoder and the llm group"),
    ({"llm": {"ranks": [2]}}, "rank 3 is in no group"),
    ({"llm": {"ranks": [2, 4]}}, r"llm rank 4 is outside the world \(0..3\)"),
    ({"encoder": {"ranks": [0, 1], "num_cpus": 2}, "llm": {"ranks": [2, 3], "num_cpus": 2}},
     r"too few resources: the groups need 8 CPU; the cluster has 4 CPU$"),
    ({"encoder": {"ranks": [0, 1], "num_gpus": 2}}, "too few resources: bundle 0 of placement group 'encoder' needs"),
    ({"placement": "spread"}, "placement 'spread' is not one of collocated, disjoint"),
    ({"max_restarts": 1}, "max_restarts, checkpoint_every and resume need checkpoint_dir"),
    ({"binary": "/nonexistent/hybrid_parallel"}, "binary '/nonexistent/hybrid_parallel' is not an executable file"),
])
def test_bad_config_fails_before_any_actor(ray_cluster, hybrid_bin, monkeypatch, change, message):
    def no_placement(_):
        raise AssertionError("placement groups were created for a bad config")

    monkeypatch.setattr(hybrid, "_placement_groups", no_placement)
    with pytest.raises(HybridConfigError, match=message):
        hybrid.train(config(hybrid_bin, **change), log=lambda _: None)


def test_config_from_dict_and_args(hybrid_bin, tmp_path):
    with pytest.raises(HybridConfigError, match="unknown key 'wrold'"):
        HybridConfig.from_dict({"wrold": 4})
    with pytest.raises(HybridConfigError, match="unknown key 'llm.gpus'"):
        HybridConfig.from_dict({"llm": {"ranks": [2, 3], "gpus": 1}})
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"world": 3, "encoder": {"ranks": [0, 1]}, "llm": {"ranks": [2], "num_gpus": 0.5}}))
    c = HybridConfig.from_args(["--config", str(f), "--steps", "5", "--llm-cpus", "2", "--binary", hybrid_bin])
    assert (c.world, c.steps, c.llm.ranks, c.llm.num_cpus, c.llm.num_gpus) == (3, 5, [2], 2.0, 0.5)
    assert c.validate().rank_args()[:6] == ["--events", "--world", "3", "--encoder-ranks", "0,1", "--llm-ranks"]


def test_another_cluster_stopping_leaves_this_one_running(ray_cluster, tmp_path):
    """local_cluster stops only its own processes: a second cluster started and stopped beside the fixture's
    (as a second test run on the same machine would) leaves this one's processes and tasks alone."""
    import sys

    import ray
    from jitembed.ray.local import _cluster_pids

    ours = _cluster_pids(ray_cluster["temp_dir"], ray_cluster["gcs"])
    assert ours, "the fixture's cluster processes are not found by its temp dir"
    other = tmp_path / "other.py"
    other.write_text("import ray\nfrom jitembed.ray.local import local_cluster, _cluster_pids\n"
                     "with local_cluster(num_cpus=1, serve=False) as c:\n"
                     "    assert ray.get(ray.remote(lambda: 7).remote()) == 7\n"
                     "    td, gcs = c['temp_dir'], c['gcs']\n"
                     "assert not _cluster_pids(td, gcs), 'the second cluster left processes'\n")
    r = subprocess.run([sys.executable, str(other)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert ours <= _cluster_pids(ray_cluster["temp_dir"], ray_cluster["gcs"]), "the second cluster's stop killed ours"
    assert ray.get(ray.remote(lambda: 5).remote(), timeout=60) == 5
