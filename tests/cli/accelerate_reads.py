"""Loads a configuration file with Python Accelerate's own loader and prints what it read as JSON.

Usage: python accelerate_reads.py FILE

Run it with a Python that has Accelerate (see tests/cli/README or tools/setup.sh). The output is one
JSON object: "accelerate" (its version), "class" (ClusterConfig or SageMakerConfig), "fields" (every
dataclass field, enums as their value) and "types" (each field's Python type name, so that a caller
can tell the enum DistributedType.NO from the boolean False a plain NO would have become).
Exits 1 with the loader's error on stderr when Accelerate refuses the file.
"""

import dataclasses
import enum
import json
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: accelerate_reads.py FILE")
    import accelerate
    from accelerate.commands.config.config_args import load_config_from_file

    try:
        config = load_config_from_file(sys.argv[1])
    except Exception as e:  # the loader raises ValueError, KeyError, TypeError...
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    fields, types = {}, {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        types[f.name] = type(value).__name__
        fields[f.name] = value.value if isinstance(value, enum.Enum) else value
    json.dump(
        {
            "accelerate": accelerate.__version__,
            "class": type(config).__name__,
            "fields": fields,
            "types": types,
        },
        sys.stdout,
        sort_keys=True,
    )
    print()


if __name__ == "__main__":
    main()
