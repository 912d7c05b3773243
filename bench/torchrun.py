"""`python3 -m torch.distributed.run` with the one fix Debian 12 needs.

torch 1.13's `Std.from_str` looks the value up by iterating over the `Std` IntFlag; under Python
3.11 that iteration no longer yields the zero member NONE, so the default "0" of --redirects and
--tee becomes None and the launcher dies at start with "AttributeError: 'NoneType' object has no
attribute 'get'". This maps that None back to Std.NONE and then runs the unmodified launcher.
"""

import sys

from torch.distributed.elastic.multiprocessing import api

_from_str = api.Std.from_str.__func__


def _fixed_from_str(cls, value):
    parsed = _from_str(cls, value)
    return cls.NONE if parsed is None else parsed


api.Std.from_str = classmethod(_fixed_from_str)

from torch.distributed import run  # noqa: E402

if __name__ == "__main__":
    sys.exit(run.main())
