#!/usr/bin/env python3
"""ctest tools/server_model_repository: jitembed-server --model-repository DIR over HTTP on 127.0.0.1.

A repository with a good jitembed-backend model and a refused one: the index shows the failure with its
reason while the good model serves; fixing the config and POSTing load re-reads it; unload empties it.
Usage: server_model_repository_case.py <jitembed-server> <work dir>. Python standard library only."""
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

server, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
repo = os.path.join(work, "repo")
TEXT = ('backend: "jitembed"\nmax_batch_size: 8\n'
        'parameters { key: "model" value { string_value: "text-embed" } }\n'
        'parameters { key: "text_dim" value { string_value: "16" } }\n'
        'parameters { key: "text_max_length" value { string_value: "8" } }\n')
for name, text in (("text", TEXT + 'model_warmup [ { name: "w" batch_size: 1 } ]\n'), ("bad", TEXT + "sequence_batching { }\n")):
    os.makedirs(os.path.join(repo, name, "1"))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(text)

proc = subprocess.Popen([server, "--model-repository", repo, "--port", "0", "--io-threads", "1", "--preprocess-threads", "1"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def post(url, path, body=b""):
    req = urllib.request.Request(url + path, data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


try:
    line = proc.stdout.readline()
    if "listening on " not in line:
        print("jitembed-server did not start:", line, proc.stderr.read(), file=sys.stderr)
        sys.exit(1)
    url = line.split("listening on ")[1].strip()
    status, body = post(url, "/v2/repository/index")
    check(status == 200, f"index status {status}")
    idx = {e["name"]: e for e in json.loads(body)}
    check(idx.get("text", {}).get("state") == "READY", f"text not READY: {idx}")
    check(idx.get("text", {}).get("ignored") == ["model_warmup"], f"text ignored fields: {idx}")
    check(idx.get("bad", {}).get("state") == "UNAVAILABLE" and "'sequence_batching'" in idx["bad"].get("reason", ""),
          f"bad not UNAVAILABLE with its reason: {idx}")
    # the good model serves: a JSON KServe request with one BYTES row
    req = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1, 1], "data": ["a caption"]}]}
    status, body = post(url, "/v2/models/text/infer", json.dumps(req).encode())
    check(status == 200, f"infer status {status}: {body[:200]}")
    if status == 200:
        outs = {o["name"]: o for o in json.loads(body)["outputs"]}
        check(outs.get("pooled", {}).get("shape") == [1, 16], f"pooled shape: {outs.get('pooled', {}).get('shape')}")
    # fix the broken config: load re-reads the directory
    with open(os.path.join(repo, "bad", "config.pbtxt"), "w") as f:
        f.write(TEXT)
    status, body = post(url, "/v2/repository/models/bad/load")
    check(status == 200, f"load after the fix: {status} {body[:200]}")
    status, body = post(url, "/v2/repository/index")
    check(any(e["name"] == "bad" and e.get("state") == "READY" for e in json.loads(body)), f"bad not READY after load: {body}")
    status, body = post(url, "/v2/repository/models/text/unload")
    check(status == 200, f"unload status {status}")
    status, body = post(url, "/v2/repository/index")
    check(any(e["name"] == "text" and e.get("reason") == "unloaded" for e in json.loads(body)), f"text not unloaded: {body}")
finally:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
check("model 'bad' failed to load" in err and "model_warmup" in err, f"the log lacks the failure or the ignored fields: {err}")
if failures:
    print("tools/server_model_repository:\n  " + "\n  ".join(failures), file=sys.stderr)
    sys.exit(1)
print("tools/server_model_repository: the index shows the refused model while the good one serves; load and unload re-read the directory")
