"""One rank of the Ray test's torchrun-launched training loop: jitembed.torch.Loader over a shard of JPEGs,
embeddings of the Ray app's Python VAE (the Client follows the app's endpoints URL), one pass; writes the ids and
failures it saw to OUT/rank<r>.json. argv: SHARD ENDPOINTS_URL MODEL OUT"""
import json
import os
import sys
import time

import torch.distributed as dist

import jitembed
import jitembed.torch as jt


def main() -> None:
    shard, url, model, out = sys.argv[1:5]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    with jitembed.Client(endpoints_url=url, request_timeout_ms=60000) as client:
        loader = jt.Loader(shard, client, [("latent", model, "image", "latent")], batch_size=4, seed=1,
                           samples_per_request=2, requests_in_flight=4, max_buffered=8)  # fetching keeps pace
        ids, failed, steps = [], [], 0
        for step in loader:
            assert step["latent"].shape[1:] == (4, 8, 8)
            time.sleep(0.15)  # the training step: the epoch lasts long enough to lose a replica in it
            ids += step["ids"]
            failed += step["failed"]
            steps += 1
            if steps == 2:
                open(os.path.join(out, f"rank{rank}.started"), "w").close()
        loader.close()
        retries = client.stats()["retries"]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "ids": ids, "failed": failed, "steps": steps, "retries": retries}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
