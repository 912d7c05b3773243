"""An independent reader for a safetensors file written by libaccel: prints "<name> <sum>" per tensor
and, first, which reader ran. Prefers the Hugging Face `safetensors` package (with numpy); without
it, parses the file straight from the format specification (8-byte little-endian header length,
JSON header, raw little-endian data)."""
import json
import struct
import sys

path = sys.argv[1]
try:
    from safetensors import safe_open  # noqa: F401

    with safe_open(path, framework="np") as f:
        print("reader safetensors-package")
        for name in f.keys():
            print(name, float(f.get_tensor(name).astype("float64").sum()))
except ImportError:
    import numpy as np

    print("reader specification")
    types = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4", "U8": "u1", "F16": "<f2"}
    with open(path, "rb") as fh:
        data = fh.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    base = 8 + length
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        values = np.frombuffer(data[base + begin:base + end], dtype=types[info["dtype"]])
        assert values.size == int(np.prod(info["shape"])) if info["shape"] else values.size == 1
        print(name, float(values.astype("float64").sum()))
