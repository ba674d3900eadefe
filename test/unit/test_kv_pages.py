"""Paged KV caches (`runtime.kv_pages`, `DecodeSession(kv_memory=...)`) on
the host: the pool's accounting (pages shared by neighbouring slots, the
budget, nothing backed when a request does not fit), host pages handed
back, a paged session decoding the same tokens as one with whole caches,
a pool sized by a fraction of the memory, and the serving engine admitting
requests by free pages, keeping a finished request's pages for the
prompts that begin with its tokens until an admission needs them."""

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
    assert pool.reclaimable([1]) == 5 and pool.reclaimable([0]) == 0
    pool.release(1, keep=2)  # bytes 1000..1199 stay: pages 3 and 4
    assert k.live == v.live == {3, 4} and pool.backed(1) == 2
    pool.ensure(0, 10)  # pages 0-3: page 3 shared again
    assert pool.reclaimable([1]) == 1 and pool.reclaimable([0, 1]) == 5
    pool.release(0)
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
    engine = Engine(session, chunk=8, reuse_prefixes=False)
    try:
        def run(prompt, m):
            return _submit(engine, prompt, m)
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


def test_copy_positions(tiny):
    """`copy_positions` gives slot 1 slot 0's keys and values (whole and
    paged caches, which back the copy's pages first); the errors."""
    config, weights, path = tiny
    whole = model.DecodeSession(path, weights)
    paged = model.DecodeSession(path, weights, kv_memory=2 * 3 * PAGE, kv_page_bytes=PAGE)
    for s in (whole, paged):
        s.prefill([list(range(3, 33))], slots=[0])  # 30 positions: a page of a 3-page pool
        before = s.slot_writes.copy()
        s.copy_positions(0, 1, 0, 30)
        assert s.slot_writes[1] == before[1] + 1 and s.slot_writes[0] == before[0]
        for name in ("k_cache", "v_cache"):
            cache = np.asarray(s.buffers[name], np.float32)
            assert cache[0, :30].any()
            np.testing.assert_array_equal(cache[1, :30], cache[0, :30])
        # The copy decodes as the original: the same next tokens.
        out = s.decode_launch([0, 1], [33, 33], [30, 30], [2, 2], [[-1], [-1]], 2)
        assert out[0][0] == out[1][0] and len(out[0][0]) == 2
    assert paged.kv_pages.backed(1) == 32 and paged.kv_pages.used == 2
    with pytest.raises(ValueError, match="the same slot"):
        whole.copy_positions(1, 1, 0, 4)
    with pytest.raises(ValueError, match=r"positions \[0, 65\) are not within the compiled context 64"):
        whole.copy_positions(0, 1, 0, 65)
    with pytest.raises(ValueError, match="dst slot 2 is not a cache slot"):
        whole.copy_positions(0, 2, 0, 4)
    paged.release(0)
    with pytest.raises(ValueError, match="slot 0 holds 0 positions, not 4"):
        paged.copy_positions(0, 1, 0, 4)
    paged.release(1)
    paged.prefill([list(range(3, 63))], slots=[0])  # 60 positions: 2 pages; slot 1 needs 2 more
    with pytest.raises(KVCacheFull, match="slot 1 needs"):
        paged.copy_positions(0, 1, 0, 60)
    whole.close()
    paged.close()


def test_engine_keeps_pages_for_prefixes_until_needed(tiny):
    """A pool of 2 pages, slots of 2: a finished request's slot keeps its
    pages; a prompt that begins with its tokens joins that slot and takes
    them (no page more); an unrelated request that needs 2 pages takes
    them back (the kept prefix is gone: the next prompt like it reuses
    nothing). Every request gets the tokens it gets alone."""
    config, weights, path = tiny
    session = model.DecodeSession(path, weights, kv_memory=2 * 2 * PAGE, kv_page_bytes=PAGE)
    whole = model.DecodeSession(path, weights)
    engine = Engine(session, chunk=8)
    pool = session.kv_pages
    try:
        def run(prompt, m):
            out = _submit(engine, prompt, m)()
            assert out == whole.generate([prompt], m).tokens[0]
            return out
        p = [(7 * i) % 50 + 2 for i in range(30)]
        a = run(p, 10)  # writes 39 positions of slot 0: both its pages, kept
        assert pool.used == 2 and pool.backed(0) == 39 and engine.prompts.to_dict() == \
            {"requests": 1, "hits": 0, "positions": 29, "reused": 0}
        b = p + a[:4] + [1, 1]
        run(b, 5)  # its first 34 positions are slot 0's
        assert pool.used == 2 and engine.prompts.to_dict() == \
            {"requests": 2, "hits": 1, "positions": 29 + 35, "reused": 34}
        run([3] * 40, 10)  # 49 positions of slot 1: slot 0's pages go back
        assert pool.backed(0) == 0 and pool.backed(1) == 49
        run(p[:20] + [4, 4], 5)
        assert engine.prompts.hits == 1
    finally:
        engine.close()
        session.close()
        whole.close()


def test_engine_under_load_with_prefixes_pages_and_cancels(tmp_path):
    """Randomized: 4 slots, a pool of 5 pages where they could hold 8, 30
    requests from 3 threads whose prompts start with one of three shared
    prefixes, some cancelled after their first tokens. Every request that
    ran to its length has the tokens it has alone (a session with whole
    caches), a cancelled one a prefix of them; prefixes were reused; once
    idle, the pages still backed belong to free slots only."""
    import random
    import threading

    config = model.tiny_config("qwen3")
    weights = model.random_weights(config, seed=8)
    path = model.compile_model(config, target="cpu", max_batch=4, max_context=64, workers=2, split_len=16,
                               cache_dir=tmp_path / "cache")
    whole = model.DecodeSession(path, weights)
    paged = model.DecodeSession(path, weights, kv_memory=2 * 5 * PAGE, kv_page_bytes=PAGE)
    engine = Engine(paged, chunk=6)
    rng = random.Random(5)
    prefixes = [[rng.randrange(8, config.vocab_size) for _ in range(n)] for n in (20, 33, 41)]
    jobs = []
    for i in range(30):
        prompt = rng.choice(prefixes) + [rng.randrange(8, config.vocab_size) for _ in range(rng.randrange(1, 9))]
        jobs.append((prompt, rng.randrange(2, 64 - len(prompt)), i % 7 == 3))
    results: list = [None] * len(jobs)
    try:
        def client(k):
            for i in range(k, len(jobs), 3):
                prompt, m, cancel = jobs[i]
                out, done = [], threading.Event()

                def on_output(req, tokens, finish, out=out, done=done, cancel=cancel):
                    out.extend(tokens)
                    if tokens and cancel:
                        engine.cancel(req)
                    if finish:
                        out.append(finish)
                        done.set()
                engine.submit(prompt, SamplingParams(max_tokens=m, ignore_eos=True), on_output)
                time.sleep(rng.random() * 0.01)
                assert done.wait(120)
                results[i] = out
        threads = [threading.Thread(target=client, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for (prompt, m, cancel), out in zip(jobs, results):
            *tokens, finish = out
            alone = whole.generate([prompt], m).tokens[0]
            if finish == "length":
                assert tokens == alone, (prompt, m)
            else:
                assert cancel and finish == "abort" and tokens == alone[: len(tokens)]
        assert engine.prompts.hits > 0 and engine.busy == 0
        pool = paged.kv_pages
        assert pool.used == pool.reclaimable(range(4)) and pool.used <= pool.budget
    finally:
        engine.close()
        paged.close()
        whole.close()


def _submit(engine, prompt, m):
    """Submits a greedy request of `m` tokens; returns a function that
    waits for its tokens."""
    out, done = [], []

    def on_output(req, tokens, finish):
        out.extend(tokens)
        if finish:
            done.append(finish)
    engine.submit(prompt, SamplingParams(max_tokens=m, ignore_eos=True), on_output)
    return lambda: (_wait(done), out)[1]


def _wait(done):
    deadline = time.time() + 120
    while not done and time.time() < deadline:
        time.sleep(0.01)
    assert done
