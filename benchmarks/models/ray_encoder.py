"""The Ray Serve arm of bench_models.py: a deployment as a Ray user writes it around a PyTorch encoder,
`@serve.batch` collecting single images from concurrent requests into one forward, with PIL + torchvision
preprocessing (Resize(size) + CenterCrop(size) + ToTensor + Normalize(0.5, 0.5), as Triton's model.py).
It speaks the KServe v2 HTTP subset the benchmark's client uses (GET metadata / ready, POST infer with
Triton's binary tensor extension: one BYTES input, one FP32 output), so that the same C++ client with the
same bytes drives every server arm; the parsing is a few lines of json + struct per request."""
import asyncio
import io
import json
import struct

import numpy as np
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse, Response


@serve.deployment(max_ongoing_requests=256, ray_actor_options={"num_cpus": 1})
class Encoder:
    def __init__(self, name: str, model_file: str, size: int, threads: int, out_shape: list, max_batch: int, delay_s: float):
        import torch
        from torchvision import transforms as T

        torch.set_num_threads(threads)
        self.torch = torch
        self.name, self.out_shape = name, out_shape
        self.model = torch.jit.load(model_file).eval()
        self.tf = T.Compose([T.Resize(size), T.CenterCrop(size), T.ToTensor(), T.Normalize([0.5] * 3, [0.5] * 3)])
        self.encode_batch.set_max_batch_size(max_batch)
        self.encode_batch.set_batch_wait_timeout_s(delay_s)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.002)
    async def encode_batch(self, jpegs: list) -> list:
        from PIL import Image

        x = self.torch.stack([self.tf(Image.open(io.BytesIO(b)).convert("RGB")) for b in jpegs])
        with self.torch.inference_mode():
            y = self.model(x).numpy()
        return list(y)

    async def __call__(self, request: Request) -> Response:
        path = request.url.path
        if request.method == "GET":
            if path.endswith("/ready"):
                return Response(b"", status_code=200)
            return JSONResponse({"name": self.name, "versions": ["1"], "platform": "ray_serve",
                                 "inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [-1, 1]}],
                                 "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, *self.out_shape]}]})
        body = await request.body()
        hlen = int(request.headers.get("inference-header-content-length", len(body)))
        header = json.loads(body[:hlen])
        inp = header["inputs"][0]
        raw = body[hlen:hlen + int(inp["parameters"]["binary_data_size"])]
        rows, off = [], 0
        while off < len(raw):  # Triton's BYTES serialization: uint32 LE length + bytes, per element
            (n,) = struct.unpack_from("<I", raw, off)
            rows.append(raw[off + 4:off + 4 + n])
            off += 4 + n
        y = np.ascontiguousarray(np.stack(await asyncio.gather(*[self.encode_batch(r) for r in rows])), dtype=np.float32)
        data = y.tobytes()
        head = json.dumps({"model_name": self.name, "model_version": "1", "id": header.get("id", ""),
                           "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": list(y.shape),
                                        "parameters": {"binary_data_size": len(data)}}]}).encode()
        return Response(head + data, media_type="application/octet-stream",
                        headers={"Inference-Header-Content-Length": str(len(head))})
