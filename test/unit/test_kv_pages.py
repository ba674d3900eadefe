"""Paged KV caches (`runtime.kv_pages`, `DecodeSession(kv_memory=...)`) on
the host: the pool's accounting (pages shared by neighbouring slots, the
budget, nothing backed when a request does not fit), host pages handed
back, a paged session decoding the same tokens as one with whole caches,
a pool sized by a fraction of the memory, and the serving engine admitting
requests by free pages."""

import mmap
import time

import numpy as np
import pytest

from event_tensor import model
from event_tensor.runtime.kv_pages import HostPages, KVCacheFull, KVPages, memory_info, pool_bytes
from event_tensor.serving import Engine, SamplingParams

PAGE = mmap.PAGESIZE


class Recorder:
    """A backing that records which pages are backed."""

    def __init__(self):
        self.live: set[int] = set()

    def back(self, page):
        assert page not in self.live
        self.live.add(page)

    def drop(self, page):
        self.live.remove(page)

    def close(self):
        pass


def test_pool_accounting():
    # 3 slots of 10 positions of 100 bytes, pages of 256 bytes: slot 1
    # (bytes 1000..1999) shares page 3 with slot 0 and page 7 with slot 2.
    k, v = Recorder(), Recorder()
    pool = KVPages([k, v], slots=3, positions=10, token_bytes=100, page_bytes=256, budget=6)
    assert pool.total == 12 and pool.free == 6
    pool.ensure(0, 10)  # bytes 0..999: pages 0-3
    assert k.live == v.live == {0, 1, 2, 3} and pool.free == 2
    assert pool.needed(1, 2) == 1  # bytes 1000..1199: pages 3 (held) and 4
    pool.ensure(1, 2)
    assert k.live == {0, 1, 2, 3, 4} and pool.backed(1) == 2
    with pytest.raises(KVCacheFull, match="slot 1 needs 3 more KV pages for 10 positions"):
        pool.ensure(1, 10)
    assert k.live == {0, 1, 2, 3, 4} and pool.backed(1) == 2  # nothing backed
    pool.release(0)  # page 3 stays: slot 1 uses it
    assert k.live == v.live == {3, 4} and pool.backed(0) == 0
    pool.ensure(1, 10)
    assert k.live == {3, 4, 5, 6, 7} and pool.free == 1
    pool.ensure(1, 4)  # already backed
    pool.release(1)
    assert k.live == v.live == set() and pool.free == 6
    with pytest.raises(ValueError, match="holds nothing"):
        KVPages([k], slots=1, positions=1, token_bytes=1, page_bytes=256, budget=0)


def test_host_pages_hand_memory_back():
    pages = HostPages(3 * PAGE + 5, PAGE)
    a = pages.array([4 * PAGE], np.uint8)
    a[:] = 7
    pages.drop(1)
    assert (a[PAGE:2 * PAGE] == 0).all() and (a[:PAGE] == 7).all() and (a[2 * PAGE:] == 7).all()
    with pytest.raises(ValueError, match="not a multiple of the host's page size"):
        HostPages(PAGE, PAGE + 1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("paged")
    config = model.tiny_config("llama")
    weights = model.random_weights(config, seed=3)
    path = model.compile_model(config, target="cpu", max_batch=2, max_context=64, workers=2,
                               cache_dir=root / "cache")
    return config, weights, path


def test_paged_session_decodes_as_whole_caches(tiny):
    """A position is 2 layers x 1 KV head x 32 x 2 bytes = 128 bytes, a
    4 KiB page 32 positions: a pool of 3 pages (both caches) holds a
    prompt of 5 and 40 new tokens in slot 0 and nothing more; the tokens
    are those of whole caches; a launch past the pool fails before it
    starts; released pages let slot 1 run."""
    config, weights, path = tiny
    whole = model.DecodeSession(path, weights)
    assert whole.kv_pages is None
    paged = model.DecodeSession(path, weights, kv_memory=2 * 3 * PAGE, kv_page_bytes=PAGE)
    pool = paged.kv_pages
    assert pool.budget == 3 and pool.used == 0 and pool.page_tokens() == 32
    prompt = [5, 9, 2, 7, 1]
    want = whole.generate([prompt], 40).tokens
    assert paged.generate([prompt], 40).tokens == want
    assert pool.backed(0) == 44 and pool.used == 2
    # Slot 1 starts at position 64 (page 2): a prompt of 40 needs pages 2
    # and 3; one is free.
    with pytest.raises(KVCacheFull, match="slot 1 needs 2 more KV pages"):
        paged.prefill([list(range(1, 41))], slots=[1])
    paged.release(0)
    assert pool.used == 0
    assert paged.prefill([list(range(1, 41))], slots=[1]).tolist() == \
        whole.prefill([list(range(1, 41))], slots=[1]).tolist()
    for name in ("k_cache", "v_cache"):
        np.testing.assert_array_equal(np.asarray(paged.buffers[name], np.float32)[1, :40],
                                      np.asarray(whole.buffers[name], np.float32)[1, :40])
    paged.reset()
    assert pool.used == 0 and not np.asarray(paged.buffers["k_cache"], np.float32).any()
    with pytest.raises(ValueError, match="slot 2 is not a cache slot"):
        paged.release(2)
    with pytest.raises(ValueError, match="less than one KV page"):
        model.DecodeSession(path, weights, kv_memory=PAGE, kv_page_bytes=PAGE)
    with pytest.raises(ValueError, match="kv_memory must be a positive number of bytes"):
        model.DecodeSession(path, weights, kv_memory=0)
    paged.close()
    whole.close()


def test_pool_from_a_memory_fraction(tiny, monkeypatch):
    """gpu_memory_fraction: the pool is what keeps the memory in use at
    most that fraction of it (on a cpu session the host's memory), in
    whole pages of both caches; a fraction that leaves no page, or given
    with kv_memory, is refused."""
    assert pool_bytes(0.5, 70, 100) == 20 and pool_bytes(0.2, 70, 100) == 0
    free, total = memory_info("cpu")
    assert 0 < free <= total
    config, weights, path = tiny
    import event_tensor.model.session as session_module

    # 100 pages of memory, 94 in use: all of it leaves 6 pages, 3 for each
    # cache (of the 4 a cache has); 95% leaves one, not one for each.
    monkeypatch.setattr(session_module, "memory_info", lambda device, index=0: (6 * PAGE, 100 * PAGE))
    paged = model.DecodeSession(path, weights, gpu_memory_fraction=1.0, kv_page_bytes=PAGE)
    assert paged.kv_pages.budget == 3
    assert paged.generate([[5, 9, 2]], 8).tokens == model.DecodeSession(path, weights).generate([[5, 9, 2]], 8).tokens
    paged.close()
    with pytest.raises(ValueError, match=r"gpu_memory_fraction 0.95 leaves no KV page on the host: 0.00 of 0.00 GiB"):
        model.DecodeSession(path, weights, gpu_memory_fraction=0.95, kv_page_bytes=PAGE)
    for bad in (0, 1.5, True, "0.5"):
        with pytest.raises(ValueError, match="gpu_memory_fraction must be in"):
            model.DecodeSession(path, weights, gpu_memory_fraction=bad)
    with pytest.raises(ValueError, match="give kv_memory or gpu_memory_fraction, not both"):
        model.DecodeSession(path, weights, gpu_memory_fraction=0.5, kv_memory=4 * PAGE)


def test_engine_admits_by_free_pages(tiny):
    """Two slots of 2 pages, a pool of 2: requests of a page each run
    together; one that needs 2 pages waits until both are back (and the
    one behind it waits too); every request gets the tokens it gets alone.
    With a pool of 1 page, a request that needs 2 is refused at submit."""
    config, weights, path = tiny
    session = model.DecodeSession(path, weights, kv_memory=2 * 2 * PAGE, kv_page_bytes=PAGE)
    engine = Engine(session, chunk=8)
    try:
        def run(prompt, m):
            out, done = [], []

            def on_output(req, tokens, finish):
                out.extend(tokens)
                if finish:
                    done.append(finish)
            engine.submit(prompt, SamplingParams(max_tokens=m, ignore_eos=True), on_output)
            return lambda: (_wait(done), out)[1]
        # Positions written: 21, 17, 59 (2 pages), 11.
        jobs = [([3, 4], 20), ([8] * 6, 12), ([1] * 30, 30), ([2, 2, 2], 9)]
        alone = [run(p, m)() for p, m in jobs]
        assert session.kv_pages.used == 0
        waits = [run(p, m) for p, m in jobs]
        assert [w() for w in waits] == alone
        assert session.kv_pages.used == 0
    finally:
        engine.close()
        session.close()
    small = model.DecodeSession(path, weights, kv_memory=2 * PAGE, kv_page_bytes=PAGE)
    engine = Engine(small, chunk=8)
    try:
        with pytest.raises(ValueError, match=r"need 2 KV pages, more than this server's 1"):
            engine.submit([1] * 30, SamplingParams(max_tokens=30), lambda *a: None)
    finally:
        engine.close()
        small.close()


def _wait(done):
    deadline = time.time() + 120
    while not done and time.time() < deadline:
        time.sleep(0.01)
    assert done
