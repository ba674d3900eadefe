"""KV-cache memory backed page by page, as sequences grow (runtime-only).

A decode session's caches are `[slot, position, layer, KV head, D]`
(`model.layout.cache_shape`): a slot's first n positions, over all layers,
are one contiguous run of bytes. With paging (`DecodeSession(kv_memory=...)`)
the caches' address range is reserved whole but backed only where a
sequence has positions: fixed-size pages from one pool of `budget` pages,
backed before a launch writes a slot's positions (`KVPages.ensure`) and
given back when its sequence ends (`KVPages.release`). The kernels are the
same as without paging: the device's virtual memory maps the pool's pages
under the caches' addresses (cuMemCreate / cuMemMap), so the attention
tiles read a slot's positions through one contiguous view and no block
table. On the host the caches are anonymous memory that the OS backs when
touched; a released page is handed back (madvise) and reads as zeros.

A page holds `page_bytes` of every cache (K and V, on every device of a
tensor-parallel session); a slot whose byte range is not a multiple of a
page shares its first and last page with its neighbours, which stay backed
while either needs them."""

from __future__ import annotations

import mmap
from typing import Any, Sequence

import numpy as np

from .errors import DeviceError

__all__ = ["DevicePages", "HostPages", "KVCacheFull", "KVPages", "PAGE_BYTES", "memory_info", "pool_bytes"]

#: The default page: the granularity of the GPU's virtual memory (2 MiB on
#: the H100 and H200). Tokens per page = PAGE_BYTES / (layers x KV heads x
#: D x 2 bytes): 128 for Llama-3.2-1B, 32 for Llama-3.1-8B.
PAGE_BYTES = 2 << 20


def memory_info(device: str, index: int = 0) -> tuple[int, int]:
    """(free, total) bytes of the memory that paged caches of `device`
    take their pages from: CUDA device `index` ("cuda"; its primary
    context), or the host's physical memory ("cpu": available and
    installed)."""
    if device == "cpu":
        import os

        size = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * size, os.sysconf("SC_PHYS_PAGES") * size
    from .cuda import _check

    d, dev, context = _primary_context(index)
    try:
        _check(d.cuCtxSetCurrent(context), "cuCtxSetCurrent")
        free, total = _check(d.cuMemGetInfo(), "cuMemGetInfo")
    finally:
        d.cuDevicePrimaryCtxRelease(dev)
    return int(free), int(total)


def _primary_context(index: int):
    """(driver, device, its primary context retained) of CUDA device
    `index`; the caller releases it (cuDevicePrimaryCtxRelease)."""
    from .cuda import _check, _driver

    d = _driver()
    _check(d.cuInit(0), "cuInit")
    dev = _check(d.cuDeviceGet(index), "cuDeviceGet")
    return d, dev, _check(d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")


def pool_bytes(fraction: float, free: int, total: int) -> int:
    """The bytes of KV pages that leave the memory in use at most
    `fraction` of `total`, given `free` bytes free now: fraction x total
    minus what is in use (the weights and buffers of this process and the
    memory of any other), or 0."""
    return max(0, int(fraction * total) - (total - free))


class KVCacheFull(RuntimeError):
    """The KV pages a launch needs are more than the pool has free."""


class HostPages:
    """One cache in host memory: an anonymous mapping of `nbytes` (whole
    pages), backed by the OS where written; `drop` hands a page back."""

    def __init__(self, nbytes: int, page_bytes: int):
        if page_bytes % mmap.PAGESIZE:
            raise ValueError(f"page_bytes {page_bytes} is not a multiple of the host's page size {mmap.PAGESIZE}")
        self.page_bytes = page_bytes
        self.size = -(-nbytes // page_bytes) * page_bytes
        self._map = mmap.mmap(-1, self.size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)

    def array(self, shape: Sequence[int], dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        count = int(np.prod(shape))
        return np.frombuffer(self._map, dtype=dtype, count=count).reshape(shape)

    def back(self, page: int) -> None:
        pass  # the OS backs a page when it is written

    def drop(self, page: int) -> None:
        self._map.madvise(mmap.MADV_DONTNEED, page * self.page_bytes, self.page_bytes)

    def close(self) -> None:
        pass  # the mapping goes with the arrays that view it


class DevicePages:
    """One cache on CUDA device `device`: a reserved virtual address range
    of `nbytes` (whole pages) under which `back` maps a page of device
    memory (from the driver's virtual memory management); `drop` unmaps it
    and keeps its memory for the next `back`. `pointer` is the cache's
    address for the kernels."""

    def __init__(self, device: int, nbytes: int, page_bytes: int):
        from .cuda import _check

        self._d, self._dev, self._context = _primary_context(device)
        d = self._d
        self._check, self.device = _check, device
        self._current()
        prop = d.CUmemAllocationProp()
        prop.type = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device
        self._prop = prop
        granule = int(_check(d.cuMemGetAllocationGranularity(
            prop, d.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            "cuMemGetAllocationGranularity"))
        if page_bytes % granule:
            raise ValueError(f"page_bytes {page_bytes} is not a multiple of device {device}'s virtual memory "
                             f"granularity ({granule} bytes)")
        access = d.CUmemAccessDesc()
        access.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        access.location.id = device
        access.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        self._access = [access]
        self.page_bytes = page_bytes
        self.size = -(-nbytes // page_bytes) * page_bytes
        self.pointer = int(_check(d.cuMemAddressReserve(self.size, page_bytes, 0, 0), "cuMemAddressReserve"))
        self._mapped: dict[int, Any] = {}  # page -> its memory handle
        self._spare: list = []  # handles of dropped pages

    def _current(self) -> None:
        self._check(self._d.cuCtxSetCurrent(self._context), "cuCtxSetCurrent")

    def back(self, page: int) -> None:
        d, check = self._d, self._check
        self._current()
        handle = self._spare.pop() if self._spare else check(d.cuMemCreate(self.page_bytes, self._prop, 0),
                                                             "cuMemCreate")
        address = self.pointer + page * self.page_bytes
        try:
            check(d.cuMemMap(address, self.page_bytes, 0, handle, 0), "cuMemMap")
        except DeviceError:
            self._spare.append(handle)
            raise
        self._mapped[page] = handle
        check(d.cuMemSetAccess(address, self.page_bytes, self._access, 1), "cuMemSetAccess")

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """Copies `nbytes` at byte offset `src` of the cache to offset `dst`
        (both backed), ordered after the launches before it on the
        device's default stream."""
        self._current()
        self._check(self._d.cuMemcpyDtoD(self.pointer + dst, self.pointer + src, nbytes), "cuMemcpyDtoD")

    def drop(self, page: int) -> None:
        self._current()
        self._check(self._d.cuMemUnmap(self.pointer + page * self.page_bytes, self.page_bytes), "cuMemUnmap")
        self._spare.append(self._mapped.pop(page))

    def close(self) -> None:
        if self.pointer is None:
            return
        d = self._d
        self._current()
        for page in list(self._mapped):
            d.cuMemUnmap(self.pointer + page * self.page_bytes, self.page_bytes)
            self._spare.append(self._mapped.pop(page))
        for handle in self._spare:
            d.cuMemRelease(handle)
        self._spare = []
        d.cuMemAddressFree(self.pointer, self.size)
        d.cuDevicePrimaryCtxRelease(self._dev)
        self.pointer = None


class KVPages:
    """The pages of a session's caches (`backings`: one `HostPages` or
    `DevicePages` per cache and device, all of one geometry: `slots` slots
    of `positions` positions of `token_bytes` each). At most `budget`
    pages are backed at once."""

    def __init__(self, backings: list, *, slots: int, positions: int, token_bytes: int, page_bytes: int,
                 budget: int):
        self.backings = backings
        self.slots, self.positions, self.token_bytes, self.page_bytes = slots, positions, token_bytes, page_bytes
        self.slot_bytes = positions * token_bytes
        self.total = -(-slots * self.slot_bytes // page_bytes)
        self.budget = min(int(budget), self.total)
        if self.budget < 1:
            raise ValueError(f"a KV budget of {budget} pages holds nothing")
        self._users: dict[int, int] = {}  # backed page -> slots that use it
        self._extent = [0] * slots  # positions backed per slot

    @property
    def used(self) -> int:
        return len(self._users)

    @property
    def free(self) -> int:
        return self.budget - self.used

    def page_tokens(self) -> float:
        """Positions per page (a slot's pages hold this many on average)."""
        return self.page_bytes / self.token_bytes

    def _pages(self, slot: int, tokens: int) -> range:
        if tokens <= 0:
            return range(0)
        start = slot * self.slot_bytes
        return range(start // self.page_bytes, -(-(start + tokens * self.token_bytes) // self.page_bytes))

    def needed(self, slot: int, tokens: int) -> int:
        """The pages `ensure(slot, tokens)` would take from the pool."""
        return sum(1 for p in self._pages(slot, min(tokens, self.positions)) if p not in self._users)

    def needed_alone(self, slot: int, tokens: int) -> int:
        """The pages of `slot`'s first `tokens` positions, shared or not."""
        return len(self._pages(slot, min(tokens, self.positions)))

    def backed(self, slot: int) -> int:
        """The positions of `slot` backed now."""
        return self._extent[slot]

    def reclaimable(self, slots) -> int:
        """The backed pages that only `slots` use: those `release` of every
        one of them would give back."""
        users: dict[int, int] = {}
        for slot in set(slots):
            for p in self._pages(slot, self._extent[slot]):
                users[p] = users.get(p, 0) + 1
        return sum(1 for p, n in users.items() if n == self._users[p])

    def ensure(self, slot: int, tokens: int) -> None:
        """Backs positions [0, tokens) of `slot` (at most the slot's
        positions); raises KVCacheFull, backing nothing, if the pool
        has too few free pages."""
        tokens = min(int(tokens), self.positions)
        if tokens <= self._extent[slot]:
            return
        held = set(self._pages(slot, self._extent[slot]))
        new = [p for p in self._pages(slot, tokens) if p not in held]
        fresh = [p for p in new if p not in self._users]
        if len(fresh) > self.free:
            raise KVCacheFull(f"slot {slot} needs {len(fresh)} more KV pages for {tokens} positions "
                              f"({self.page_tokens():.0f} positions a page), {self.free} of {self.budget} are free")
        done = []
        try:
            for p in fresh:
                for b in self.backings:
                    b.back(p)
                done.append(p)
        except Exception:
            for p in done:
                for b in self.backings:
                    b.drop(p)
            raise
        for p in new:
            self._users[p] = self._users.get(p, 0) + 1
        self._extent[slot] = tokens

    def release(self, slot: int, keep: int = 0) -> None:
        """Gives back the pages of `slot` past its first `keep` positions
        that no other slot uses; those positions are forgotten."""
        keep = min(max(int(keep), 0), self._extent[slot])
        kept = set(self._pages(slot, keep))
        for p in self._pages(slot, self._extent[slot]):
            if p in kept:
                continue
            self._users[p] -= 1
            if self._users[p] == 0:
                del self._users[p]
                for b in self.backings:
                    b.drop(p)
        self._extent[slot] = keep

    def close(self) -> None:
        for b in self.backings:
            b.close()
