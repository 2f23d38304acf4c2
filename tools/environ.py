"""environ.py: set environment variables for a block and put back what was there (tools only).

Used where a tool must fix the BLAS thread count (or an offline switch) before numpy is imported: by its
own process later in the block, or by the worker processes it spawns, which inherit the environment."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Mapping


@contextlib.contextmanager
def environ(values: Mapping[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


ONE_BLAS_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
