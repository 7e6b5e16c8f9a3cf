"""Fixed-rate SHARDS without numba: a small C library (``native_shards.c`` and its header;
sized samples in ``native_sized.c``, the JSON scanners in ``native_json.c``) for the sampled
curve's whole-process fast path.

A sampled run's answer costs little beyond reading the trace, but importing numba and loading
its first cached kernel costs about 0.45 s of every process, more than the sampled work on a
3 x 10^7-access trace. This library does what the compiled sampling kernels do for a fixed rate
and integer keys, with or without sizes, with only numpy and ctypes imported: the seeded filter
(:func:`~.hashed_stack.multi_filter`'s hash and thresholds; 8 keys at a time with AVX-512), the
scans of the common text forms, and each seed's replay (a Fenwick tree over positions, of sizes
for a sized sample, and a table from key hash to its latest position), giving the same
distances as :func:`~.hashed_stack.shards_replay`.

The C sources are compiled on first use by the machine's C compiler (``$CC``, else ``cc``) into
the cache folder (``$STACKDIST_CACHE_DIR``, else ``$XDG_CACHE_HOME/stackdist``, else
``~/.cache/stackdist``; a private folder in the temporary one when that is not writable), one
file per source version, written atomically; later processes load it in about a millisecond.
Without a compiler, or with ``STACKDIST_NATIVE=0``, :func:`library` is None and callers use the
numba path (same answers).

>>> lib = library()
>>> lib is None or NativeShards(lib, [1], [2**64 - 1]).feed_values(np.array([5, 6, 5], np.uint64)).histograms()[0][0].tolist()
[0, 0, 1]
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SAMPLE_LIMIT", "NativeShards", "cache_folder", "library"]

_FOLDER = Path(__file__).parent
_FLAGS = ["-O2", "-std=c99", "-shared", "-fPIC"]
_LOADED: dict[str, Any] = {}
SAMPLE_LIMIT = 1 << 24
"""Most sampled accesses a seed keeps (8 bytes each until the replay, 20 during it); a larger
sample (a high rate on a long trace) is left to the compiled path, whose memory is bounded by
the sampled keys. Two halves of a feed keep at most twice this: well inside the replay's 32-bit
Fenwick tree (2**31 positions)."""
_TWO_THREADS = 1 << 20  # keys (or 8x bytes) from which a chunk is fed on two threads


def cache_folder() -> Path:
    """Where the compiled library is kept. O(1).

    >>> import os
    >>> "STACKDIST_CACHE_DIR" in os.environ or cache_folder().name == "stackdist"
    True
    """
    base = os.environ.get("STACKDIST_CACHE_DIR")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stackdist"


def library() -> Any:
    """The loaded C library, compiling it first when needed; None when native code is off
    (``STACKDIST_NATIVE=0``) or cannot be built here. O(1) after the first call."""
    if os.environ.get("STACKDIST_NATIVE", "1") == "0":
        return None
    if "lib" not in _LOADED:
        _LOADED["lib"] = _load()
    return _LOADED["lib"]


def _load() -> Any:
    digest = hashlib.sha256(" ".join(_FLAGS).encode() + sys.platform.encode())
    for part in _sources() + [_FOLDER / "native_shards.h"]:
        digest.update(part.name.encode() + part.read_bytes())
    name = f"native_shards-{digest.hexdigest()[:16]}.so"
    for where in (cache_folder, _private_temporary_folder):
        try:  # the cache folder, else (read-only home) a private temporary one
            folder = where()
            if not (folder / name).exists():
                _compile(folder / name)
            _check_private(folder / name)
            return _declare(ctypes.CDLL(str(folder / name)))
        except (OSError, subprocess.SubprocessError, AttributeError):
            continue
    return None


def _private_temporary_folder() -> Path:
    """``stackdist-<uid>`` in the temporary folder, made only by this user (mode 0700)."""
    folder = Path(tempfile.gettempdir()) / f"stackdist-{os.getuid() if hasattr(os, 'getuid') else 0}"
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    return folder


def _check_private(path: Path) -> None:
    """OSError unless ``path`` and its folder are this user's and no one else may write them: a
    shared folder (the temporary one) must not hand this process another user's library."""
    if not hasattr(os, "getuid"):
        return
    for part in (path.parent, path):
        st = part.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            raise OSError(f"{part} is not this user's alone")


def _sources() -> list[Path]:
    """The C files of the library: ``native_shards.c`` and every other ``native_*.c`` here."""
    return sorted(_FOLDER.glob("native_*.c"))


def _compile(path: Path) -> None:
    """Compile the source into ``path`` through a temporary file (two processes may race)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise OSError("no C compiler")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        subprocess.run([compiler, *_FLAGS, "-o", tmp, *map(str, _sources())], check=True, capture_output=True, timeout=120)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _declare(lib: Any) -> Any:
    p, i64, c_int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    signatures = {
        "sd_new": (p, [c_int, p, p]), "sd_free": (None, [p]), "sd_feed_values": (c_int, [p, p, i64]),
        "sd_feed_lines": (i64, [p, p, i64]), "sd_merge": (c_int, [p, p]), "sd_replay_one": (c_int, [p, c_int]),
        "sd_accesses": (i64, [p]),
        "sd_kept": (i64, [p, c_int]), "sd_cold": (i64, [p, c_int]), "sd_keys": (i64, [p, c_int]),
        "sd_hist_len": (i64, [p, c_int]), "sd_hist_copy": (None, [p, c_int, p]),
        "sd_feed_sized_values": (c_int, [p, p, p, i64]), "sd_feed_sized_lines": (i64, [p, p, i64, c_int]),
        "sd_replay_sized_one": (c_int, [p, c_int]), "sd_kind": (i64, [p]), "sd_total_size": (i64, [p]),
        "sd_warm": (i64, [p, c_int]), "sd_cold_size": (i64, [p, c_int]), "sd_sampled_size": (i64, [p, c_int]),
        "sd_warm_copy": (None, [p, c_int, p, p]), "sd_set_limit": (None, [p, i64]), "sd_too_large": (i64, [p]),
        "sd_set_simd": (None, [c_int]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


class NativeShards:
    """Several seeds' fixed-rate samples of one trace, fed in chunks, then replayed.

    ``salts[j]`` and ``cuts[j]``: seed j's salt (:func:`~.thresholds.seed_mix`) and inclusive
    hash threshold. Memory: the sampled keys (8 bytes each) until :meth:`histograms`. A large
    chunk is fed on two threads (each half into its own sample, the second appended to the
    first), and the seeds are replayed on two threads: the C calls run without the GIL.
    """

    def __init__(self, lib: Any, salts: list[int], cuts: list[int], limit: int = SAMPLE_LIMIT) -> None:
        self._lib, self._salts, self._cuts, self._limit = lib, list(salts), list(cuts), limit
        self._other_too_large = False  # the second half of a two-thread feed passed the limit
        self.k = len(salts)
        salt_arr, cut_arr = np.array(salts, np.uint64), np.array(cuts, np.uint64)  # alive through the call
        self._handle = lib.sd_new(self.k, salt_arr.ctypes.data, cut_arr.ctypes.data)
        if not self._handle:
            raise MemoryError("cannot start the native sampler")
        lib.sd_set_limit(self._handle, limit)

    def __del__(self) -> None:
        if getattr(self, "_handle", None):
            self._lib.sd_free(self._handle)
            self._handle = None

    def feed_values(self, values: np.ndarray) -> NativeShards:
        """Feed 64-bit key values (uint64 or int64, C-contiguous). O(n x seeds)."""
        arr = np.ascontiguousarray(values)
        if arr.dtype not in (np.uint64, np.int64):
            raise TypeError(f"keys must be 64-bit integers, got {arr.dtype}")
        half = arr.shape[0] // 2 if arr.shape[0] >= _TWO_THREADS else arr.shape[0]
        feed = self._lib.sd_feed_values
        codes = self._in_halves(lambda h: feed(h, arr[:half].ctypes.data, half),
                                (lambda h: feed(h, arr[half:].ctypes.data, arr.shape[0] - half)) if half < arr.shape[0] else None)
        if any(codes) and not self.too_large:
            raise MemoryError("out of memory in the native sampler")
        return self

    def feed_sized_values(self, keys: np.ndarray, sizes: np.ndarray) -> NativeShards:
        """Feed 64-bit key values with their sizes (int64, each in 1..2**62). O(n x seeds)."""
        arr, size_arr = np.ascontiguousarray(keys), np.ascontiguousarray(sizes, np.int64)
        n = arr.shape[0]
        half = n // 2 if n >= _TWO_THREADS else n
        feed = self._lib.sd_feed_sized_values
        codes = self._in_halves(lambda h: feed(h, arr.ctypes.data, size_arr.ctypes.data, half),
                                (lambda h: feed(h, arr[half:].ctypes.data, size_arr[half:].ctypes.data, n - half))
                                if half < n else None)
        if any(codes) and not self.too_large:
            raise MemoryError("out of memory in the native sampler")
        return self

    def feed_sized_lines(self, data: np.ndarray, delimiter: str) -> bool:
        """Feed ``[+-]digits<delimiter>digits`` lines (a uint8 array); False, with the sampler
        then unusable, at the first line of another shape. O(bytes x seeds)."""
        scan, delim = self._lib.sd_feed_sized_lines, ord(delimiter)
        return self.feed_text(data, lambda h, ptr, n: scan(h, ptr, n, delim))

    @property
    def too_large(self) -> bool:
        """True once a seed's sample passed the limit (the feeding then stopped): memory
        O(sampled accesses) is the compiled path's O(sampled keys) no more. O(1)."""
        return self._other_too_large or bool(self._lib.sd_too_large(self._handle))

    @property
    def kind(self) -> int:
        """What was fed: 0 nothing, 1 unit sizes, 2 sizes, 3 both. O(1)."""
        return int(self._lib.sd_kind(self._handle))

    @property
    def total_size(self) -> int:
        """The sizes of every sized access fed; -1 past 2**62. O(1)."""
        return int(self._lib.sd_total_size(self._handle))

    def sized_histograms(self) -> list[tuple[np.ndarray, np.ndarray, int, int, int, int]] | None:
        """Replay each seed's sized sample (two threads): (each warm sampled access's distance,
        its size, cold accesses, their sizes, distinct sampled keys, sampled size) per seed;
        None when a key's size changed (the compiled path reports where). O(m log m)."""
        codes = self._on_two_threads(self._lib.sd_replay_sized_one)
        if -3 in codes:
            return None
        if any(codes):
            raise MemoryError("out of memory in the native sampler")
        lib, out = self._lib, []
        for j in range(self.k):
            warm = int(lib.sd_warm(self._handle, j))
            d, z = np.zeros(warm, np.int64), np.zeros(warm, np.int64)
            lib.sd_warm_copy(self._handle, j, d.ctypes.data, z.ctypes.data)
            out.append((d, z, int(lib.sd_cold(self._handle, j)), int(lib.sd_cold_size(self._handle, j)),
                        int(lib.sd_keys(self._handle, j)), int(lib.sd_sampled_size(self._handle, j))))
        return out

    def _on_two_threads(self, replay_one: Any) -> list[int]:
        """``replay_one(handle, seed)`` for every seed, the seeds split over two threads: the codes."""
        codes = [0] * self.k

        def replay(first: int) -> None:
            for j in range(first, self.k, 2):
                codes[j] = replay_one(self._handle, j)

        _beside(lambda: replay(0), lambda: replay(1))
        return codes

    def feed_lines(self, data: np.ndarray) -> bool:
        """Feed the keys of ``[+-]digits`` lines (a uint8 array); False, with the sampler then
        unusable, at the first line of another shape. O(bytes x seeds)."""
        return self.feed_text(data, self._lib.sd_feed_lines)

    def feed_text(self, data: np.ndarray, scan: Any) -> bool:
        """Feed text (a uint8 array of whole lines) through the C scanner ``scan(handle, bytes,
        length) -> accesses, -1 (a line it does not take) or -2 (out of memory)``; a large
        text is cut after a newline near its middle and its halves scanned on two threads.
        False, with the sampler then unusable, when the scanner declines. O(bytes x seeds)."""
        cut = _line_start_after(data, data.shape[0] // 2) if data.shape[0] >= 8 * _TWO_THREADS else data.shape[0]
        got = self._in_halves(lambda h: scan(h, data[:cut].ctypes.data, cut),
                              (lambda h: scan(h, data[cut:].ctypes.data, data.shape[0] - cut)) if cut < data.shape[0] else None)
        if -2 in got and not self.too_large:
            raise MemoryError("out of memory in the native sampler")
        return bool(min(got) >= 0)

    @property
    def lib(self) -> Any:
        """The loaded C library (for scanners declared in other modules). O(1)."""
        return self._lib

    def _in_halves(self, first: Callable[[Any], int], second: Callable[[Any], int] | None) -> list[int]:
        """``first`` on this sample and ``second`` (when there is a second half) on a fresh one
        on another thread, that one then appended to this. Their return codes."""
        if second is None:
            return [first(self._handle), 0]
        other = NativeShards(self._lib, self._salts, self._cuts, self._limit)
        codes = [0, 0]

        def run(i: int, fn: Callable[[Any], int], handle: Any) -> None:
            codes[i] = fn(handle)

        _beside(lambda: run(0, first, self._handle), lambda: run(1, second, other._handle))
        self._other_too_large = self._other_too_large or other.too_large
        if codes[0] >= 0 and codes[1] >= 0 and self._lib.sd_merge(self._handle, other._handle):
            raise MemoryError("out of memory in the native sampler")
        return codes

    @property
    def n_accesses(self) -> int:
        """Accesses fed so far. O(1)."""
        return int(self._lib.sd_accesses(self._handle))

    def kept(self) -> list[int]:
        """Each seed's sampled accesses so far. O(seeds)."""
        return [int(self._lib.sd_kept(self._handle, j)) for j in range(self.k)]

    def histograms(self) -> list[tuple[np.ndarray, int, int]]:
        """Replay each seed's sample (the seeds split over two threads): ([sampled accesses at
        each distance 0..max], cold accesses, distinct sampled keys) per seed. O(m log m) for
        m sampled accesses."""
        codes = self._on_two_threads(self._lib.sd_replay_one)
        if any(codes):
            raise MemoryError("out of memory in the native sampler")
        out = []
        for j in range(self.k):
            hist = np.zeros(int(self._lib.sd_hist_len(self._handle, j)), np.int64)
            self._lib.sd_hist_copy(self._handle, j, hist.ctypes.data)
            out.append((hist, int(self._lib.sd_cold(self._handle, j)), int(self._lib.sd_keys(self._handle, j))))
        return out


def _beside(here: Callable[[], None], there: Callable[[], None]) -> None:
    """``here`` on this thread and ``there`` on another at once (the C calls release the GIL);
    an exception in either is raised here, after both have ended."""
    failed: list[BaseException] = []

    def run_there() -> None:
        try:
            there()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
            failed.append(exc)

    thread = threading.Thread(target=run_there, name="stackdist-native")
    thread.start()
    try:
        here()
    finally:
        thread.join()
    if failed:
        raise failed[0]


def _line_start_after(data: np.ndarray, pos: int) -> int:
    """The offset just after the first newline at or after ``pos`` (the end if none). O(line)."""
    window = 1 << 12
    while pos < data.shape[0]:
        found = data[pos : pos + window].tobytes().find(b"\n")
        if found >= 0:
            return pos + found + 1
        pos += window
    return data.shape[0]
