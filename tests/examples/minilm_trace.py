#!/usr/bin/env python3
"""minilm_trace.py MODEL_DIR OUT_DIR: transformers' BertModel of the MiniLM folder (build/minilm/model)
traced to TorchScript on (input_ids, attention_mask), saved as OUT_DIR/minilm.pt, for
minilm_dispatch (accel_dispatch_model of the archive from the folder's model.safetensors).

Runs in the test venv (transformers 4.40.2 on torch 1.13). The archive's tensors are named as the
checkpoint's (embeddings.*, encoder.layer.N.*, pooler.*, the position_ids buffer): checked here, so
that the dispatch finds every one of them in model.safetensors. transformers' token_type_ids buffer
(zeros, not persistent, so not in the checkpoint) is removed before tracing: BertEmbeddings then
makes the zeros itself, the same values. The trace is also checked against the eager model on a
batch of another shape (traced sizes are those of the inputs, not constants). Exits 77 (skipped)
when transformers cannot be imported."""
import json
import os
import struct
import sys
import warnings


def checkpoint_names(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return {k for k in header if k != "__metadata__"}


def main():
    model_dir, out_dir = sys.argv[1:3]
    warnings.filterwarnings("ignore")  # transformers' deprecations, the tracer's notes on sizes
    try:
        import torch
        from transformers import BertModel
    except ImportError as e:
        print(f"skipped: transformers is not in this Python ({sys.executable}): {e}")
        return 77
    model = BertModel.from_pretrained(model_dir, torchscript=True).eval()
    del model.embeddings.token_type_ids  # not in the checkpoint; the forward makes the zeros
    model.requires_grad_(False)  # an inference archive: its forwards record no autograd graph
    ids = torch.tensor([[101, 7592, 2088, 2003, 102], [101, 2748, 102, 0, 0]])
    traced = torch.jit.trace(model, (ids, (ids != 0).long()))
    path = os.path.join(out_dir, "minilm.pt")
    traced.save(path)

    loaded = torch.jit.load(path)
    names = {n for n, _ in loaded.named_parameters()} | {n for n, _ in loaded.named_buffers()}
    stored = checkpoint_names(os.path.join(model_dir, "model.safetensors"))
    if names != stored:
        sys.exit(f"the archive's tensors are not the checkpoint's: only in the archive "
                 f"{sorted(names - stored)}, only in the checkpoint {sorted(stored - names)}")
    other = torch.tensor([[101, 2023, 2003, 1037, 2936, 6251, 102], [101, 2460, 102, 0, 0, 0, 0],
                          [101, 1037, 2117, 2028, 102, 0, 0]])
    with torch.no_grad():
        want = model(other, (other != 0).long())[0]
        got = loaded(other, (other != 0).long())[0]
    if not torch.allclose(got, want, atol=1e-5, rtol=0):
        sys.exit(f"the trace differs from the eager model on another shape: "
                 f"{(got - want).abs().max().item()}")
    print(f"traced {len(names)} tensors to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
