"""The PyTorch side of bench/load_memory.c: the same model (LAYERS nn.Linear(WIDTH, WIDTH), named
l0 ... as libaccel names them), built first, then the checkpoint loaded PyTorch's way, the peak RSS
measured over the load alone (VmHWM reset through /proc/self/clear_refs, as load_memory.c does).

    python3 bench/load_memory_ref.py convert ST PT          the safetensors file as a torch.save file
    python3 bench/load_memory_ref.py torch.load PT LAYERS WIDTH
    VENV_PYTHON bench/load_memory_ref.py safetensors ST LAYERS WIDTH   (needs the safetensors package)

Prints one line: BENCH {"rss_before_mb":...,"peak_mb":...,"rss_after_mb":...,"seconds":...}.
"""
import json
import struct
import sys
import time

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}


def status_mb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return float(line.split()[1]) / 1024.0
    return -1.0


def read_safetensors(path):
    """A state dict from a safetensors file, without the safetensors package."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        flat = torch.frombuffer(data[begin:end], dtype=DTYPES[t["dtype"]])
        out[name] = flat.reshape(t["shape"]).clone()
    return out


class Model(torch.nn.Module):
    def __init__(self, layers, width):
        super().__init__()
        for i in range(layers):
            setattr(self, "l%d" % i, torch.nn.Linear(width, width))


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "convert":
        torch.save(read_safetensors(path), sys.argv[3])
        return
    torch.manual_seed(2)
    model = Model(int(sys.argv[3]), int(sys.argv[4]))
    before = status_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    t0 = time.monotonic()
    if mode == "torch.load":
        state = torch.load(path)
    else:
        import safetensors.torch

        state = safetensors.torch.load_file(path)
    model.load_state_dict(state)
    del state
    seconds = time.monotonic() - t0
    print("BENCH " + json.dumps({"rss_before_mb": round(before, 1),
                                 "peak_mb": round(status_mb("VmHWM"), 1),
                                 "rss_after_mb": round(status_mb("VmRSS"), 1),
                                 "seconds": round(seconds, 3)}))


if __name__ == "__main__":
    main()
