"""Reading ``.npy`` / ``.npz`` files without Python's ``ast`` module.

Why not ``np.load``: numpy parses each array's header with
``ast.literal_eval``, and CPython 3.11 before 3.11.8 (gh-106905) keeps the AST
converter's recursion counter per interpreter, not per thread. Two threads
building ASTs at once then fail with ``SystemError: AST constructor recursion
depth mismatch``. The daemon loads the embedder's weights and the knowledge
base's vector cache in worker threads while other code (a traceback's caret
line, pytest's assertion rewriting) may parse on another thread, so a
load could fail at random under load. The header is a fixed, simple format;
a regex reads what we write and what numpy writes for plain arrays.
"""

from __future__ import annotations

import re
import struct
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

import numpy as np

__all__ = ["NpzFile", "read_npy", "read_npy_header"]

_MAGIC = b"\x93NUMPY"
_DESCR = re.compile(r"""['"]descr['"]\s*:\s*['"]([^'"]+)['"]""")
_FORTRAN = re.compile(r"""['"]fortran_order['"]\s*:\s*(True|False)""")
_SHAPE = re.compile(r"""['"]shape['"]\s*:\s*\(([^)]*)\)""")


def read_npy_header(f: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` of the ``.npy`` stream ``f``, which is left at the first data byte.

    Raises ``ValueError`` for anything but a plain (non-structured, non-object) array.
    """
    magic = f.read(8)
    if len(magic) != 8 or not magic.startswith(_MAGIC):
        raise ValueError("not a .npy file (bad magic)")
    major = magic[6]
    if major == 1:
        (length,) = struct.unpack("<H", f.read(2))
    elif major in (2, 3):
        (length,) = struct.unpack("<I", f.read(4))
    else:
        raise ValueError(f"unsupported .npy format version {major}")
    header = f.read(length).decode("utf-8" if major == 3 else "latin1")
    descr, fortran, shape = _DESCR.search(header), _FORTRAN.search(header), _SHAPE.search(header)
    if descr is None or fortran is None or shape is None:
        raise ValueError(f"unsupported .npy header {header.strip()[:120]!r}")
    dtype = np.dtype(descr.group(1))
    if dtype.hasobject:
        raise ValueError("object arrays are not read")
    dims = tuple(int(d) for d in shape.group(1).replace(" ", "").split(",") if d)
    return dims, fortran.group(1) == "True", dtype


def read_npy(f: IO[bytes]) -> np.ndarray:
    """The whole array of the ``.npy`` stream ``f`` (a fresh, writable array)."""
    shape, fortran, dtype = read_npy_header(f)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    data = f.read(count * dtype.itemsize)
    if len(data) != count * dtype.itemsize:
        raise ValueError("truncated .npy data")
    array = np.frombuffer(data, dtype=dtype, count=count)
    return array.reshape(shape, order="F" if fortran else "C").copy()


class NpzFile(Mapping[str, np.ndarray]):
    """A ``.npz`` archive read member by member (like ``np.load(path)`` on an npz, without ``ast``)."""

    def __init__(self, path: Path | str) -> None:
        self._zip = zipfile.ZipFile(path)
        self.files = [n[:-4] for n in self._zip.namelist() if n.endswith(".npy")]

    def __getitem__(self, key: str) -> np.ndarray:
        try:
            member = self._zip.open(f"{key}.npy")
        except KeyError:
            raise KeyError(f"{key} is not a file in the archive") from None
        with member:
            return read_npy(member)

    def __iter__(self) -> Iterator[str]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> NpzFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
