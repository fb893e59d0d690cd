"""The Triton arm of bench_models.py: a Python-backend model.py as a Triton user writes it around a PyTorch
encoder. Copied into <triton repository>/<model>/1/model.py by bench_models.py; config.pbtxt parameters:
model_file (the TorchScript file jitembed-server serves), size (the encoder's input side), threads (torch's
intra-op threads). Input INPUT0 TYPE_STRING [1] (JPEG bytes, one per row); output OUTPUT0 TYPE_FP32 latent.
Preprocessing with PIL + torchvision: Resize(size) (shorter side, bilinear) + CenterCrop(size) + ToTensor +
Normalize(0.5, 0.5), i.e. range [-1, 1]; every request of Triton's dynamic batch in one forward."""
import io
import json

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from PIL import Image
from torchvision import transforms as T


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        p = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        torch.set_num_threads(int(p.get("threads", "1")))
        self.model = torch.jit.load(p["model_file"]).eval()
        size = int(p["size"])
        self.tf = T.Compose([T.Resize(size), T.CenterCrop(size), T.ToTensor(), T.Normalize([0.5] * 3, [0.5] * 3)])

    def execute(self, requests):
        xs, counts = [], []
        for r in requests:
            rows = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy().reshape(-1)
            counts.append(len(rows))
            xs += [self.tf(Image.open(io.BytesIO(bytes(b))).convert("RGB")) for b in rows]
        with torch.inference_mode():
            y = self.model(torch.stack(xs)).numpy()
        out, i = [], 0
        for n in counts:
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", np.ascontiguousarray(y[i:i + n]))]))
            i += n
        return out
