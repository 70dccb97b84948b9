"""Arrays read without ``ast`` (CPython < 3.11.8, gh-106905: two threads building ASTs at once fail at random)."""

from __future__ import annotations

import ast
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from homeagent.npyfile import NpzFile, read_npy, read_npy_header


@pytest.fixture
def no_ast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any Python-level AST parse fails the test: the readers must not need one."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("ast.parse called")

    monkeypatch.setattr(ast, "parse", refuse)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.asfortranarray(np.arange(6, dtype="<i8").reshape(2, 3)),
        np.array(3.5),
        np.zeros((0, 384), np.float32),
        np.array(["ab", "c"]),
        np.arange(5, dtype=">u2"),
    ],
    ids=["c-order", "fortran", "scalar", "empty", "unicode", "big-endian"],
)
def test_npy_round_trip_like_numpy(array: np.ndarray, no_ast: None) -> None:
    buf = io.BytesIO()
    np.save(buf, array)
    buf.seek(0)
    got = read_npy(buf)
    assert got.dtype == array.dtype and got.shape == array.shape and np.array_equal(got, array)
    assert got.flags.writeable


def test_npz_members_plain_and_compressed(tmp_path: Path, no_ast: None) -> None:
    for save in (np.savez, np.savez_compressed):
        path = tmp_path / f"{save.__name__}.npz"
        save(path, vectors=np.ones((2, 3), np.float32), digests=np.array(["a", "b"]))
        with NpzFile(path) as z:
            assert sorted(z.files) == ["digests", "vectors"]
            assert z["vectors"].shape == (2, 3) and list(z["digests"]) == ["a", "b"]
            with pytest.raises(KeyError, match="nope is not a file"):
                z["nope"]


def test_what_it_refuses_it_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bad magic"):
        read_npy(io.BytesIO(b"not numpy at all"))
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    buf.seek(0)
    with pytest.raises(ValueError, match="object arrays"):
        read_npy_header(buf)
    buf = io.BytesIO()
    np.save(buf, np.arange(100))
    with pytest.raises(ValueError, match="truncated"):
        read_npy(io.BytesIO(buf.getvalue()[:-8]))
