"""The knowledge base: curated notes the user keeps, one folder per note, searched on demand.

Notes live as ``<root>/<name>/content.md`` so a user can edit them with any
editor, sync them, or drop a folder in; the daemon and the CLI work on the same
files with no database to keep in step. The index is derived: it is rebuilt
from the files whenever their names, sizes or mtimes change (checked before
each search), and chunk vectors are cached by content hash in
``<root>/.index/`` so an unchanged note is never embedded twice. Note names
cannot start with a dot, so the cache can never collide with a note.

Search is hybrid, separate from the memory layers: BM25 (``bm25s``) over
Chinese character bigrams and stemmed English words, plus cosine similarity
over the shared embedder's chunk vectors, fused by reciprocal rank; a note
scores as its best chunk.

Names are validated (no path separators, no ``..``, no leading dot, no
control characters, at most 100 characters) and writes go through a temporary
file and ``os.replace``, so a crash never leaves half a note.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import shutil
import threading
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from homeagent.memory.embedder import Embedder
from homeagent.msg import Msg
from homeagent.npyfile import NpzFile

log = logging.getLogger("homeagent.knowledge")

CONTENT_FILE = "content.md"
INDEX_DIR = ".index"
MAX_NAME_CHARS = 100
MAX_CONTENT_BYTES = 5 * 1024 * 1024
CHUNK_CHARS = 600
RRF_K = 60
MIN_COSINE = 0.3

_BAD_NAME_CHARS = re.compile(r"[/\\\x00-\x1f\x7f]")
_TOKEN = re.compile(r"([\u3400-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]+)|([^\W_]+)")
_EN_STOP = frozenset(
    "a an the and or but of to in on at by for with from as is are was were be been am do does did have has had "
    "i me my you your he she it we they this that these those what which who how not no so".split()
)


class KnowledgeError(ValueError):
    """Bad name or content; nothing was changed."""


def validate_name(name: Any) -> str:
    """A note name that is safe as one folder name under the knowledge root."""
    if not isinstance(name, str):
        raise KnowledgeError(Msg("a knowledge name must be a string"))
    name = unicodedata.normalize("NFC", name).strip()
    if not name:
        raise KnowledgeError(Msg("a knowledge name cannot be empty"))
    if len(name) > MAX_NAME_CHARS:
        raise KnowledgeError(Msg("a knowledge name is at most {max} characters", max=MAX_NAME_CHARS))
    if _BAD_NAME_CHARS.search(name):
        raise KnowledgeError(Msg("{name!r}: a knowledge name cannot contain path separators or control characters",
                                 name=name[:40]))
    if ".." in name or name.startswith("."):
        raise KnowledgeError(Msg("{name!r}: a knowledge name cannot contain '..' or start with '.'", name=name[:40]))
    return name


@dataclass
class KnowledgeInfo:
    name: str
    size: int
    updated: float
    title: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "size": self.size,
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.updated)),
            "title": self.title,
        }


@dataclass
class KnowledgeHit:
    name: str
    score: float
    snippet: str
    content: str

    def to_dict(self, max_content: int = 4000) -> dict[str, Any]:
        content = self.content if len(self.content) <= max_content else self.content[:max_content] + "\n…(truncated)"
        return {"name": self.name, "score": round(self.score, 4), "snippet": self.snippet, "content": content}


@dataclass
class _Chunk:
    name: str
    text: str
    digest: str


class _Tokenizer:
    def __init__(self) -> None:
        self._stemmer: Any = None
        self._lock = threading.Lock()

    def _stem(self, words: list[str]) -> list[str]:
        if self._stemmer is None:
            with self._lock:
                if self._stemmer is None:
                    try:
                        import Stemmer

                        self._stemmer = Stemmer.Stemmer("english")
                    except ImportError:  # pragma: no cover - PyStemmer is a dependency
                        self._stemmer = False
        return list(self._stemmer.stemWords(words)) if self._stemmer else words

    def __call__(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFKC", text).lower()
        out: list[str] = []
        latin: list[str] = []
        for m in _TOKEN.finditer(text):
            run, word = m.group(1), m.group(2)
            if run:
                if len(run) == 1:
                    out.append(run)
                else:
                    out.extend(run[i : i + 2] for i in range(len(run) - 1))
            elif word and word not in _EN_STOP:
                latin.append(word)
        return out + self._stem(latin)


def chunk_text(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """Paragraph-aligned chunks of about ``size`` characters (long paragraphs are cut)."""
    chunks: list[str] = []
    current = ""
    for para in re.split(r"\n\s*\n", text):
        para = para.strip()
        if not para:
            continue
        while len(para) > size:
            if current:
                chunks.append(current)
                current = ""
            chunks.append(para[:size])
            para = para[size:]
        if current and len(current) + len(para) + 2 > size:
            chunks.append(current)
            current = para
        else:
            current = f"{current}\n\n{para}" if current else para
    if current:
        chunks.append(current)
    return chunks


class KnowledgeBase:
    """Notes under ``root``; every method is a coroutine that does its file work in a thread."""

    def __init__(self, root: Path | str, embedder: Embedder | None = None) -> None:
        self.root = Path(root)
        self.embedder = embedder
        self._tokenize = _Tokenizer()
        self._lock = threading.Lock()  # guards the derived index
        self._signature: tuple[tuple[str, int, int], ...] | None = None
        self._chunks: list[_Chunk] = []
        self._bm25: Any = None
        self._vectors: np.ndarray | None = None
        self._vector_cache: dict[str, np.ndarray] = {}
        self._cache_loaded = False

    # ------------------------------------------------------------------ files
    def _dir(self, name: str) -> Path:
        path = self.root / validate_name(name)
        if path.resolve().parent != self.root.resolve():
            raise KnowledgeError(Msg("{name!r} does not name a folder directly under the knowledge base", name=name[:40]))
        return path

    def _list_sync(self) -> list[KnowledgeInfo]:
        out: list[KnowledgeInfo] = []
        if not self.root.is_dir():
            return out
        for entry in sorted(self.root.iterdir(), key=lambda p: p.name):
            if entry.name.startswith(".") or entry.is_symlink() or not entry.is_dir():
                continue
            content = entry / CONTENT_FILE
            try:
                st = content.stat()
            except OSError:
                continue
            title = ""
            with contextlib.suppress(OSError, UnicodeDecodeError), content.open(encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        title = line.strip().lstrip("#").strip()[:120]
                        break
            out.append(KnowledgeInfo(entry.name, st.st_size, st.st_mtime, title))
        return out

    async def entries(self) -> list[KnowledgeInfo]:
        return await asyncio.to_thread(self._list_sync)

    async def names(self) -> list[str]:
        return [i.name for i in await self.entries()]

    def _get_sync(self, name: str) -> str | None:
        try:
            return (self._dir(name) / CONTENT_FILE).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    async def get(self, name: str) -> str | None:
        """The note's markdown, or None when there is no such note."""
        return await asyncio.to_thread(self._get_sync, name)

    def _add_sync(self, name: str, content: str, overwrite: bool) -> tuple[KnowledgeInfo, bool]:
        if not isinstance(content, str) or not content.strip():
            raise KnowledgeError(Msg("knowledge content cannot be empty"))
        data = content.encode("utf-8")
        if len(data) > MAX_CONTENT_BYTES:
            raise KnowledgeError(Msg("knowledge content is {size} bytes; the limit is {limit}", size=len(data),
                                     limit=MAX_CONTENT_BYTES))
        folder = self._dir(name)
        target = folder / CONTENT_FILE
        existed = target.exists()
        if existed and not overwrite:
            raise KnowledgeError(Msg("a knowledge entry named {name!r} already exists", name=name))
        self.root.mkdir(parents=True, exist_ok=True)
        folder.mkdir(exist_ok=True)
        tmp = folder / f".{CONTENT_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        st = target.stat()
        title = next((ln.strip().lstrip("#").strip()[:120] for ln in content.splitlines() if ln.strip()), "")
        return KnowledgeInfo(folder.name, st.st_size, st.st_mtime, title), existed

    async def add(self, name: str, content: str, *, overwrite: bool = True) -> tuple[KnowledgeInfo, bool]:
        """Create or replace a note; returns its info and whether it replaced an existing one."""
        return await asyncio.to_thread(self._add_sync, name, content, overwrite)

    def _delete_sync(self, name: str) -> bool:
        folder = self._dir(name)
        if folder.is_symlink():
            raise KnowledgeError(Msg("{name!r} is a symbolic link; remove it by hand", name=name))
        if not (folder / CONTENT_FILE).exists():
            return False
        shutil.rmtree(folder)
        return True

    async def delete(self, name: str) -> bool:
        return await asyncio.to_thread(self._delete_sync, name)

    # ------------------------------------------------------------------ index
    def _current_signature(self) -> tuple[tuple[str, int, int], ...]:
        sig = []
        for info in self._list_sync():
            st = (self.root / info.name / CONTENT_FILE).stat()
            sig.append((info.name, st.st_mtime_ns, st.st_size))
        return tuple(sig)

    def _cache_path(self) -> Path | None:
        if self.embedder is None:
            return None
        model = re.sub(r"[^\w.-]+", "_", self.embedder.name)
        return self.root / INDEX_DIR / f"vectors-{model}.npz"

    def _load_cache(self) -> None:
        self._cache_loaded = True
        path = self._cache_path()
        if path is None or not path.exists():
            return
        try:
            with NpzFile(path) as data:  # not np.load: see homeagent.npyfile
                digests, vecs = data["digests"], data["vectors"]
                if self.embedder is not None and vecs.ndim == 2 and vecs.shape[1] == self.embedder.dim:
                    self._vector_cache = {str(d): vecs[i] for i, d in enumerate(digests)}
        except Exception as exc:
            log.warning("knowledge: vector cache %s unreadable (%s); re-embedding", path, exc)

    def _save_cache(self, live: set[str]) -> None:
        path = self._cache_path()
        if path is None:
            return
        keep = {d: v for d, v in self._vector_cache.items() if d in live}
        self._vector_cache = keep
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp.npz")
            digests = np.array(list(keep), dtype=str)
            dim = self.embedder.dim if self.embedder else 0
            vecs = np.stack(list(keep.values())) if keep else np.zeros((0, dim), np.float32)
            np.savez(tmp, digests=digests, vectors=vecs)
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("knowledge: cannot save the vector cache (%s)", exc)

    def _refresh_sync(self) -> None:
        with self._lock:
            sig = self._current_signature()
            if sig == self._signature:
                return
            chunks: list[_Chunk] = []
            for name, _, _ in sig:
                text = self._get_sync(name) or ""
                for piece in chunk_text(f"{name}\n{text}"):
                    chunks.append(_Chunk(name, piece, hashlib.sha256(piece.encode("utf-8")).hexdigest()))
            bm25 = None
            if chunks:
                import bm25s

                bm25 = bm25s.BM25()
                bm25.index([self._tokenize(c.text) or ["\0"] for c in chunks], show_progress=False)
            vectors = None
            if self.embedder is not None and chunks:
                if not self._cache_loaded:
                    self._load_cache()
                missing = [c for c in chunks if c.digest not in self._vector_cache]
                if missing:
                    vecs = self.embedder.embed([c.text for c in missing])
                    for c, v in zip(missing, vecs, strict=True):
                        self._vector_cache[c.digest] = np.asarray(v, dtype=np.float32)
                vectors = np.stack([self._vector_cache[c.digest] for c in chunks])
                if missing or len(self._vector_cache) != len({c.digest for c in chunks}):
                    self._save_cache({c.digest for c in chunks})
            self._chunks, self._bm25, self._vectors, self._signature = chunks, bm25, vectors, sig

    def _search_sync(self, query: str, top_k: int) -> list[KnowledgeHit]:
        self._refresh_sync()
        with self._lock:
            chunks, bm25, vectors = self._chunks, self._bm25, self._vectors
        if not chunks or not query.strip():
            return []
        rankings: list[list[int]] = []
        tokens = self._tokenize(query)
        if tokens and bm25 is not None:
            scores = np.asarray(bm25.get_scores(tokens))
            order = [int(i) for i in np.argsort(-scores) if scores[i] > 0][:50]
            rankings.append(order)
        if vectors is not None and self.embedder is not None:
            q = self.embedder.embed([query])[0]
            if np.any(q):
                sims = vectors @ q
                rankings.append([int(i) for i in np.argsort(-sims) if sims[i] >= MIN_COSINE][:50])
        fused: dict[int, float] = {}
        for ranking in rankings:
            for rank, idx in enumerate(ranking, start=1):
                fused[idx] = fused.get(idx, 0.0) + 1.0 / (RRF_K + rank)
        best: dict[str, tuple[float, int]] = {}
        for idx, score in fused.items():
            name = chunks[idx].name
            if name not in best or score > best[name][0]:
                best[name] = (score, idx)
        hits = []
        for name, (score, idx) in sorted(best.items(), key=lambda kv: -kv[1][0])[: max(1, top_k)]:
            snippet = chunks[idx].text
            if snippet.startswith(name + "\n"):
                snippet = snippet[len(name) + 1 :]
            hits.append(KnowledgeHit(name, score, snippet[:300], self._get_sync(name) or ""))
        return hits

    async def search(self, query: str, top_k: int = 5) -> list[KnowledgeHit]:
        return await asyncio.to_thread(self._search_sync, query, max(1, min(int(top_k), 50)))
