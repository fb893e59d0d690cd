"""jitembed.ray on a local Ray cluster (loopback): discovery through the registry and /<app>/endpoints, the
C++ client embedding through the replicas with results equal to jitembed-server's, the KServe compatibility
path through Ray's proxy, a replica killed with requests in flight (every sample delivered once), the queue-depth
autoscaler (1 -> 2 under load, picked up by the client), drain on scale-down (no retry needed) and a model
update through user_config under load (0 failures, the old version unloaded).

The autoscaler test has its own application and runs first; the discovery, replica-kill and scale-down/update
tests then share one application of two replicas (text_app, in this order: the kill's replacement serves the
update test). Each deployment costs a Ray worker process per replica (seconds of CPU each on a loaded 2-core
machine) and a drained teardown."""

from __future__ import annotations

import json

import pytest
import ray
from ray import serve

import jitembed.ray as jray
from conftest import endpoint_lines, eventually, http_get, http_post, listening_pids, wildcard_listeners

TEXT = "text-embed:text_dim=16,text_max_length=16,max_batch_size=8,max_queue_delay_us=500"
SMALL = {"server_options": {"io_threads": 1, "preprocess_threads": 1}, "num_cpus": 0.25, "health_check_period_s": 1.0,
         "heartbeat_s": 0.25, "leave_grace_s": 1.5}


#: text_app's model: 20 ms a batch keeps rows in flight long enough to kill a replica with them and to scale
#: down and update under load; results equal jitembed-server's TEXT (the sleep changes no output bits).
SLOW_TEXT = TEXT + ",sleep_us=20000"
V1 = {"models": [{"name": "text-embed", "version": "1"}]}


def deploy(app: str, models, **kw):
    opts = dict(SMALL)
    opts.update(kw)
    serve.run(jray.build_app(models, **opts), name=app, route_prefix=f"/{app}", blocking=False)


def endpoints(cluster, app: str):
    return endpoint_lines(http_get(f"http://{cluster['http']}/{app}/endpoints"))


def wait_endpoints(cluster, app: str, n: int, timeout_s: float = 90):
    return eventually(lambda: (lambda e: e if len(e) == n else None)(endpoints(cluster, app)), timeout_s, f"{n} endpoints of {app}")


def replica_actor_names(app: str):
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["namespace"] == "serve" and a["name"].startswith(f"SERVE_REPLICA::{app}#"))


def inflight_rows(endpoint_url: str) -> int:
    text = http_get(endpoint_url + "/metrics")
    return sum(int(float(l.rsplit(" ", 1)[1])) for l in text.splitlines() if l.startswith("jitembed_inflight_rows{"))


def loaded_versions(endpoint_url: str):
    status, _, body = http_post(endpoint_url + "/v2/repository/index", b"", {})
    assert status == 200
    return sorted((m["name"], m["version"]) for m in json.loads(body))


def remove(app: str):
    serve.delete(app)
    jray.kill_registry(app)


def kill_replica_with_rows_in_flight(app: str, eps) -> str:
    """Kills a replica process (no graceful drain) while its server holds admitted rows; returns its endpoint.
    The actors are looked up first, so the kill follows the observation of rows in flight at once (under a
    loaded CI machine the lookups took long enough for those rows to finish, and nothing was retried)."""
    names = replica_actor_names(app)
    assert len(names) == len(eps)
    # Which replica actor serves each endpoint: the registry maps replica ids (the actor name's tail) to endpoints.
    by_replica = ray.get(jray.get_registry(app, create=False).entries.remote())
    actors = {}
    for e in eps:
        name = next(n_ for n_ in names if by_replica.get(n_.rsplit("#", 1)[-1]) == e.removeprefix("http://"))
        actors[e] = ray.get_actor(name, namespace="serve")

    def kill_busy():
        for e in eps:
            if inflight_rows(e) > 0:
                ray.kill(actors[e], no_restart=True)
                return e
        return None

    return eventually(kill_busy, 30, "rows in flight on a replica", step_s=0.01)


@pytest.fixture(scope="module")
def text_app(ray_cluster):
    """One application "embed" (SLOW_TEXT, two replicas, user_config V1) for the three tests that need two
    replicas of a fixed size; each test waits for the state it needs (two registered endpoints). The
    scale-down/update test leaves one replica at version 2: it comes last in this file."""
    app = "embed"
    deploy(app, [SLOW_TEXT], num_replicas=2, user_config=V1)
    yield app
    remove(app)


def check_exactly_once(samples, n, reference=None):
    assert [s["i"] for s in samples] == list(range(n)), "every sample delivered exactly once"
    assert all(s["ok"] for s in samples)
    if reference is not None:
        assert [s["digest"] for s in samples] == [r["digest"] for r in reference]


def test_autoscaler_scales_1_to_2_on_queue_depth_and_client_follows(ray_cluster, run_client):
    app = "auto"
    spec = TEXT.replace("max_batch_size=8", "max_batch_size=4") + ",sleep_us=40000"
    deploy(app, [spec], autoscaling=jray.autoscaling_config(min_replicas=1, max_replicas=2, target_rows_per_replica=8,
                                                              upscale_delay_s=0.5, downscale_delay_s=600,
                                                              metrics_interval_s=0.2, look_back_period_s=1.0))
    first = wait_endpoints(ray_cluster, app, 1)
    url = f"http://{ray_cluster['http']}/{app}/endpoints"
    # The client runs until both replicas have answered 10 requests each (at most 12,000 samples, ~120 s on one
    # replica at 4 rows / 40 ms): the scale-up happens under its load, however long the new replica takes to
    # start on a loaded machine, and the client must pick it up from the endpoints URL to finish.
    run = run_client(["--endpoints-url", url, "--samples", "12000", "--rows-per-request", "4", "--concurrency", "12",
                      "--until-endpoints", "2"])
    both = wait_endpoints(ray_cluster, app, 2, timeout_s=60)
    assert first[0] in both
    summary, got = run.result(timeout_s=180)
    assert summary["failed"] == 0
    assert sorted(summary["endpoints"]) == both, "the client sent work to the new replica"
    assert min(summary["endpoints"].values()) >= 10
    assert 0 < summary["samples"] < 12000
    check_exactly_once(got, summary["samples"])
    remove(app)


def test_discovery_results_equal_jitembed_server_and_compat_path(ray_cluster, text_app, run_client, reference_server):
    app = text_app
    eps = wait_endpoints(ray_cluster, app, 2)
    assert all(e.startswith("http://127.0.0.1:") for e in eps)
    # Each replica's server runs in the replica's own process (the binding), on the address it registered.
    handle = serve.get_app_handle(app)
    infos = {}
    eventually(lambda: infos.update({i["endpoint"]: i for i in [handle.server_info.remote().result(timeout_s=10) for _ in range(8)]})
               or len(infos) == 2, 30, "both replicas answering server_info")
    assert sorted("http://" + e for e in infos) == eps
    for e, info in infos.items():
        assert info["in_process"]
        assert listening_pids(int(e.rsplit(":", 1)[1])) == [info["pid"]]
    handle.check_health.remote().result(timeout_s=10)  # the probe inference, through a replica
    # Loopback only: no Ray or jitembed socket listens on a wildcard or another address.
    assert wildcard_listeners() == []
    url = f"http://{ray_cluster['http']}/{app}/endpoints"
    summary, got = run_client(["--endpoints-url", url, "--samples", "96", "--rows-per-request", "3", "--concurrency", "8"]).result()
    assert summary["failed"] == 0
    assert sorted(summary["endpoints"]) == eps, "the client balanced over both discovered replicas"
    ref_url = reference_server([TEXT])
    _, ref = run_client(["--endpoints", ref_url, "--samples", "96", "--rows-per-request", "3", "--concurrency", "8"]).result()
    check_exactly_once(got, 96, ref)

    # The compatibility path: KServe v2 through Ray's proxy, the raw body handed to the embedded server.
    headers, body = jray.kserve_bytes_request("text", [b"sample-0", b"sample-1"])
    via_ray = http_post(f"http://{ray_cluster['http']}/{app}/v2/models/text-embed/infer", body, headers)
    direct = http_post(f"{eps[0]}/v2/models/text-embed/infer", body, headers)
    assert via_ray[0] == 200 and direct[0] == 200
    assert via_ray[2] == direct[2]
    # Errors keep their status and errc; the model config reports the version policy.
    status, _, err = http_post(f"http://{ray_cluster['http']}/{app}/v2/models/nope/infer", body, headers)
    assert status == 404 and json.loads(err)["errc"] == "not_found"
    cfg = json.loads(http_get(f"http://{ray_cluster['http']}/{app}/v2/models/text-embed/config"))
    assert cfg["version_policy"] == {"latest": {"num_versions": 1}}


def test_replica_killed_with_requests_in_flight_every_sample_once(ray_cluster, text_app, run_client, reference_server):
    app = text_app
    eps = wait_endpoints(ray_cluster, app, 2)
    url = f"http://{ray_cluster['http']}/{app}/endpoints"
    n = 480
    run = run_client(["--endpoints-url", url, "--samples", str(n), "--rows-per-request", "2", "--concurrency", "8", "--timeout-ms", "60000"])
    victim = kill_replica_with_rows_in_flight(app, eps)
    summary, got = run.result(timeout_s=120)
    assert summary["failed"] == 0
    assert summary["retries"] > 0, "requests in flight on the killed replica were retried"
    ref_url = reference_server([TEXT])
    _, ref = run_client(["--endpoints", ref_url, "--samples", str(n), "--rows-per-request", "2", "--concurrency", "8"]).result()
    check_exactly_once(got, n, ref)
    # The dead replica expired from the registry and Ray's restart registered a new one.
    eventually(lambda: (lambda e: len(e) == 2 and victim not in e)(endpoints(ray_cluster, app)), 90,
               "the killed replica expired and its replacement registered")


def test_scale_down_drains_without_retries_and_user_config_update_under_load(ray_cluster, text_app, run_client):
    app = text_app
    spec_v2 = TEXT + ",sleep_us=3000"
    v2 = {"models": [{"name": "text-embed", "version": "2", "spec": spec_v2}]}
    eps = wait_endpoints(ray_cluster, app, 2)
    url = f"http://{ray_cluster['http']}/{app}/endpoints"

    # Scale-down 2 -> 1 under load: the leaving replica drains; no request needs a retry.
    run = run_client(["--endpoints-url", url, "--samples", "1500", "--rows-per-request", "2", "--concurrency", "6"])
    eventually(lambda: all(inflight_rows(e) > 0 for e in eps), 30, "load on both replicas")
    deploy(app, [SLOW_TEXT], num_replicas=1, user_config=V1)  # text_app's deployment, scaled
    left = wait_endpoints(ray_cluster, app, 1, timeout_s=60)
    summary, got = run.result(timeout_s=120)
    assert summary["failed"] == 0
    assert summary["retries"] == 0, "the scale-down drained: no sample needed a retry"
    check_exactly_once(got, 1500)

    # In-place update through user_config under load: version 2 hot-swapped in, version 1 unloaded.
    run = run_client(["--endpoints-url", url, "--samples", "1500", "--rows-per-request", "2", "--concurrency", "6"])
    eventually(lambda: inflight_rows(left[0]) > 0, 30, "load on the replica")
    deploy(app, [SLOW_TEXT], num_replicas=1, user_config=v2)
    eventually(lambda: loaded_versions(left[0]) == [("text-embed", "2")], 60, "version 2 loaded and version 1 unloaded")
    summary, got = run.result(timeout_s=120)
    assert summary["failed"] == 0
    check_exactly_once(got, 1500)
    versions = [s["version"] for s in got]
    assert versions[0] == "1" and versions[-1] == "2"
    assert endpoints(ray_cluster, app) == left, "an in-place update keeps the replica (no restart)"
