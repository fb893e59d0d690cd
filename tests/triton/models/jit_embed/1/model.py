# Triton Python-backend model used as a test peer by jitembed's Triton tests (tests/triton/README.md).
#
# Input INPUT0: TYPE_STRING, one BYTES element per row (request shape [N, 1]).
# Output EMBEDDING: [N, 8], row r computed from the bytes b[0..n) of input row r alone (row order kept):
#
#     S_j    = sum_{i=0}^{n-1} b[i] * (i + 1 + j)            j = 0..7, b[i] the unsigned byte value
#     out[j] = (S_j mod M) / 2^K
#
#   jit_embed       TYPE_FP32  M = 65521, K = 8   (values are k/256 with k < 2^16: exact in float32)
#   jit_embed_fp16  TYPE_FP16  M = 2039,  K = 6   (values are k/64 with k < 2^11: exact in float16)
#
# M and K come from the model's config.pbtxt parameters "modulus" and "scale_log2"; the output dtype from
# its EMBEDDING output. Every value is exactly representable, so a C++ test can recompute it bit for bit
# (e.g. uint64 s = sum b[i] * ((i + 1 + j) % M) % M, then float(s) / float(1 << K)).
# An empty row gives zeros. The input is the config's first input (INPUT0, or "text" for the identity
# models). This file is shared by every model here (the others' model.py are symlinks).
import json

import numpy as np
import triton_python_backend_utils as pb_utils

EMBED_DIM = 8


def embed_row(row: bytes, modulus: int, scale_log2: int, dtype) -> np.ndarray:
    b = np.frombuffer(row, dtype=np.uint8).astype(np.int64)
    i = np.arange(b.size, dtype=np.int64)[:, None]  # (n, 1)
    j = np.arange(EMBED_DIM, dtype=np.int64)[None, :]  # (1, 8)
    weights = (i + 1 + j) % modulus  # (n, 8), each < modulus
    s = (b[:, None] * weights % modulus).sum(axis=0) % modulus  # terms < modulus: no int64 overflow
    return (s.astype(np.float64) / float(1 << scale_log2)).astype(dtype)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.modulus = int(params.get("modulus", "65521"))
        self.scale_log2 = int(params.get("scale_log2", "8"))
        out_cfg = pb_utils.get_output_config_by_name(config, "EMBEDDING")
        self.dtype = pb_utils.triton_string_to_numpy(out_cfg["data_type"])
        self.input_name = config["input"][0]["name"]  # INPUT0; "text" for the identity models

    def execute(self, requests):
        responses = []
        for request in requests:
            rows = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()  # object array, (N, 1)
            rows = rows.reshape(rows.shape[0], -1)
            out = np.empty((rows.shape[0], EMBED_DIM), dtype=self.dtype)
            for r in range(rows.shape[0]):
                row = rows[r, 0]
                if isinstance(row, str):  # defensive: BYTES always arrive as bytes objects
                    row = row.encode()
                out[r] = embed_row(bytes(row), self.modulus, self.scale_log2, self.dtype)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("EMBEDDING", out)]))
        return responses
