"""Continuous batching over one `DecodeSession`: requests join and leave the
running batch between launches, without recompiling and without draining
it.

One thread owns the session. Each turn of its loop admits waiting requests
into free KV-cache slots, feeds prompt parts (at most `prefill_budget`
positions, oldest prompt first, so that long prompts do not stall the rows
that decode), and runs one decode launch of up to `chunk` steps over every
running row (a few while prompts wait to be fed): the kernel feeds each
row's tokens back itself and writes them into host memory, where the
engine's thread reads them while the launch runs and hands them to each
request's callback. The launch ends early, after the step in flight, once
a waiting request could take a free slot or a running one was cancelled.
A request's last prompt token is fed by the decode launch, not the
prefill, so its first new token is drawn by the kernel's sampler like
every later one. A finished or cancelled request frees its slot at the
next turn.

With paged KV caches (`DecodeSession(kv_memory=...)`) a request joins
only once the pool can back every position it may write (its prompt and
`max_tokens`), and it gives its pages back when it ends; a request that
the whole pool could not hold is refused at `submit`.

Prefix reuse (`reuse_prefixes`, on by default): the keys and values of a
position depend only on the tokens up to it, so a request whose prompt
begins with tokens that a cache slot holds (another running request's, or
a finished one's, left in its free slot: a shared system prompt, the
earlier turns of a chat) takes them instead of computing them. It joins
the free slot that holds the longest such prefix, the rest of that prefix
is copied in from the slot that holds more, if one does
(`DecodeSession.copy_positions`), and its prefill starts after it; a
request whose prompt a prompt being fed will cover further waits for it
(`PREFIX_WAIT`). A
finished request's slot keeps the positions it wrote until a request takes
the slot; with paged caches their pages stay backed until an admission
needs them (least recently freed slots first)."""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from ..model.layout import FINISH_CONTEXT, FINISH_LENGTH, FINISH_NONFINITE, FINISH_STOP, MAX_STOP_IDS
from ..runtime.kv_pages import KVCacheFull

__all__ = ["Engine", "EngineClosed", "QueueFull", "Request", "SamplingParams"]


class QueueFull(RuntimeError):
    """More requests wait than the engine accepts (`max_waiting`)."""


class EngineClosed(RuntimeError):
    """A request to an engine that was closed."""


@dataclass(frozen=True)
class SamplingParams:
    """How one request generates: at most `max_tokens` new tokens (None:
    until the compiled context is full); `temperature` 0 is greedy, above
    0 samples softmax(logits / temperature), after the `top_k`, `top_p` and
    `min_p` filters (`DecodeSession.sampling_rows`), with the generator
    keyed by `seed` (None: a random seed); the `repetition_penalty`
    (prompt and generated tokens), `frequency_penalty` and
    `presence_penalty` (generated tokens) change the logits before either,
    after `logit_bias` (token id -> number added to its logit; None:
    none); with `logprobs` (0 to MAX_TOP_LOGPROBS; None: off) each token
    comes with its log-probability and that many of the most likely ids
    with theirs (`Request.logprobs`); with `prompt_logprobs` (the same
    range) each prompt token after the first gets its `Logprob` too
    (`Request.prompt_logprobs`: the prompt is fed by decode steps that
    take its own tokens, one a step, instead of the prefill kernel; then
    `max_tokens` may be 0); the generation ends at one of `stop_ids` or,
    unless `ignore_eos`, at one of the model's end ids."""

    max_tokens: int | None = 16
    temperature: float = 0.0
    seed: int | None = None
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: Mapping[int, float] | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    stop_ids: tuple[int, ...] = ()
    ignore_eos: bool = False


# The host's words for the kernel's finish codes (OpenAI's finish_reason:
# "stop" or "length"; "error" for a row without a token).
_REASONS = {FINISH_STOP: "stop", FINISH_LENGTH: "length", FINISH_CONTEXT: "length", FINISH_NONFINITE: "error"}


@dataclass(eq=False)
class Request:
    """One generation in the engine. `on_output(request, tokens, finish)`
    is called from the engine's thread with each launch's new tokens and,
    last, the finish reason ("stop", "length", "error" with `error` set,
    or "abort" after `Engine.cancel`). With `params.logprobs`, `logprobs`
    holds a `Logprob` per token of `tokens`, each in place before
    `on_output` gets its token; with `params.prompt_logprobs`,
    `prompt_logprobs` one per prompt token after the first, all in place
    before `on_output` gets a token or the finish reason."""

    prompt: list[int]
    params: SamplingParams
    on_output: Callable[["Request", list[int], str | None], None]
    max_tokens: int = 0
    sampling: dict = field(default_factory=dict)  # one row of DecodeSession.sampling_rows
    stop_ids: np.ndarray | None = None  # the kernel's row (DecodeSession.stop_rows)
    slot: int = -1
    fed: int = 0  # prompt positions in the cache
    tokens: list[int] = field(default_factory=list)
    logprobs: list | None = None  # Logprob per token, with params.logprobs
    prompt_logprobs: list | None = None  # Logprob per prompt token but the first
    finish: str | None = None
    error: str | None = None
    cancelled: bool = False

    def __post_init__(self):
        self.prompt_ids = np.asarray(self.prompt, np.int64)
        if self.params.logprobs is not None and self.logprobs is None:
            self.logprobs = []
        if self.params.prompt_logprobs is not None and self.prompt_logprobs is None:
            self.prompt_logprobs = []

    @property
    def scoring(self) -> bool:
        """Whether its prompt is fed by decode steps (prompt_logprobs)."""
        return self.params.prompt_logprobs is not None

    def given(self) -> int:
        """Prompt tokens still to come out of decode steps (scored)."""
        return len(self.prompt) - 1 - self.fed if self.scoring else 0


class Engine:
    """Serves requests with the session's kernel; `submit` and `cancel` may
    be called from any thread. `chunk` is the most decode steps per launch
    (PREFILL_STEPS while prompts wait to be fed); tokens are handed out as
    the kernel makes them, and a launch ends early once a waiting request
    could join or a running one was cancelled;
    `prefill_budget` the prompt positions fed per turn, over the waiting
    prompts oldest first (default: PREFILL_LAUNCHES launches of the prefill
    kernel's rows, else of the decode kernel's max_batch);
    `max_waiting` how many requests may wait for a slot before `submit`
    raises QueueFull; `reuse_prefixes` whether a prompt takes the keys and
    values of its first tokens from a cache slot that holds them (the
    module's docstring)."""

    #: Decode steps per launch while prompts wait to be fed, and the prompt
    #: launches' worth of positions (each of the prefill kernel's rows) fed
    #: between two decode launches by default.
    PREFILL_STEPS = 4
    PREFILL_LAUNCHES = 4
    #: With prefix reuse, a waiting request whose prompt shares at least
    #: this many positions with a prompt being fed (more than any cache slot
    #: holds) waits until that prompt is in and then takes them, instead of
    #: computing them too (the requests behind it wait as well: admission is
    #: in order; the prompt being fed is older, so it is fed first).
    PREFIX_WAIT = 16

    def __init__(self, session, *, eos_ids: Sequence[int] = (), chunk: int = 256, prefill_budget: int | None = None,
                 max_waiting: int = 256, reuse_prefixes: bool = True):
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"chunk must be a positive integer, got {chunk!r}")
        self.session = session
        self.vocab = session.config.vocab_size
        self.eos_ids = [int(i) for i in eos_ids if 0 <= int(i) < self.vocab]
        self.chunk = chunk
        rows = getattr(session, "prefill_rows", None) or session.max_batch
        self.prefill_budget = prefill_budget or self.PREFILL_LAUNCHES * rows
        self.max_waiting = max_waiting
        self.max_context = session.max_context
        self._cv = threading.Condition()
        self._waiting: deque[Request] = deque()
        self._prefilling: deque[Request] = deque()
        self._running: list[Request] = []
        self.reuse_prefixes = bool(reuse_prefixes)
        self._free = list(range(session.max_batch))  # least recently freed first
        # Per free slot: the tokens whose keys and values it holds at
        # positions 0.. (its last request's prompt and tokens, and how many).
        self._held: list[tuple[np.ndarray, list[int], int]] = [_NOTHING] * session.max_batch
        self._held_at = np.zeros(session.max_batch, np.int64)  # session.slot_writes when freed
        self._owner: dict[int, Request] = {}  # a taken slot's request
        self._deferred: Request | None = None  # the waiting request that waits for a prompt being fed
        self._room = 0  # paged caches: pages an admission could have (free + only free slots' own)
        self.prompts = PromptStats()
        self._closed = False
        self.launches = 0
        self.decode = DecodeStats()
        # Requests ended, by finish reason.
        self.finished = {"stop": 0, "length": 0, "abort": 0, "error": 0}
        self._thread = threading.Thread(target=self._loop, name="event-tensor-engine", daemon=True)
        self._thread.start()

    # -- requests ------------------------------------------------------------

    def check(self, prompt: Sequence[int], params: SamplingParams) -> tuple[int, np.ndarray, dict]:
        """(the request's max new tokens, its stop-id row, its sampling row)
        or a ValueError naming what is wrong."""
        m, least = params.max_tokens, 0 if params.prompt_logprobs is not None else 1
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < least):
            raise ValueError(f"max_tokens must be a {'non-negative' if least == 0 else 'positive'} integer, got {m!r}")
        seed = secrets.randbits(64) if params.seed is None else params.seed
        if len(prompt) == 0:
            raise ValueError("the prompt is empty")
        bad = [t for t in prompt if isinstance(t, bool) or not isinstance(t, (int, np.integer))
               or not 0 <= t < self.vocab]
        if bad:
            raise ValueError(f"token id {bad[0]!r} is outside the vocabulary [0, {self.vocab})")
        room = self.max_context + 1 - len(prompt)
        if room < 1:
            raise ValueError(f"the prompt has {len(prompt)} tokens; this model's context is {self.max_context} "
                             "tokens")
        max_tokens = room if params.max_tokens is None else params.max_tokens
        sampling = self.session.sampling_rows(1, temperature=params.temperature, seed=seed, top_k=params.top_k,
                                              top_p=params.top_p, min_p=params.min_p,
                                              repetition_penalty=params.repetition_penalty,
                                              frequency_penalty=params.frequency_penalty,
                                              presence_penalty=params.presence_penalty, outputs_from=len(prompt),
                                              logit_bias=params.logit_bias,
                                              logprobs=params.logprobs if params.prompt_logprobs is None
                                              else params.prompt_logprobs)
        if params.prompt_logprobs is not None:
            if params.logprobs not in (None, params.prompt_logprobs):
                raise ValueError(f"logprobs ({params.logprobs}) and prompt_logprobs ({params.prompt_logprobs}) must be "
                                 "the same count")
            if "forced_to" not in self.session.buffers:
                raise ValueError("this kernel cannot score prompt tokens (compiled before it could): recompile it")
            sampling["forced_to"] = np.array([len(prompt)], np.int32)
        if max_tokens > room:
            raise ValueError(f"the prompt ({len(prompt)} tokens) and max_tokens ({max_tokens}) exceed this model's "
                             f"context of {self.max_context} tokens (at most {room} new tokens)")
        pool = self.session.kv_pages
        pages = self.session.kv_pages_for(_positions(len(prompt), max_tokens))
        if pool is not None and pages > pool.budget:
            raise ValueError(f"the prompt ({len(prompt)} tokens) and max_tokens ({max_tokens}) need {pages} KV "
                             f"pages, more than this server's {pool.budget}")
        # The session checks the request's ids; the model's end ids join them.
        self.session.stop_rows([list(params.stop_ids)], 1)
        stops = list(dict.fromkeys([*params.stop_ids, *([] if params.ignore_eos else self.eos_ids)]))
        if len(stops) > MAX_STOP_IDS:
            raise ValueError(f"at most {MAX_STOP_IDS} stop ids (with the model's end ids), got {len(stops)}")
        return max_tokens, self.session.stop_rows([stops], 1)[0], sampling

    def submit(self, prompt: Sequence[int], params: SamplingParams,
               on_output: Callable[[Request, list[int], str | None], None]) -> Request:
        max_tokens, stops, sampling = self.check(prompt, params)
        req = Request([int(t) for t in prompt], params, on_output, max_tokens=max_tokens, sampling=sampling,
                      stop_ids=stops)
        if max_tokens == 0 and len(prompt) == 1:
            # Nothing to score, nothing to generate.
            req.finish = "length"
            self._emit(req, [], "length")
            return req
        with self._cv:
            if self._closed:
                raise EngineClosed("the engine is closed")
            if len(self._waiting) >= self.max_waiting:
                raise QueueFull(f"{len(self._waiting)} requests are waiting already (max_waiting); try again later")
            self._waiting.append(req)
            self._cv.notify()
        return req

    def cancel(self, req: Request) -> None:
        """Ends `req` at the next turn (its callback gets "abort") and frees
        its slot; nothing for a finished request."""
        with self._cv:
            req.cancelled = True
            self._cv.notify()

    def close(self) -> None:
        """Stops the loop after the current launch; requests still open end
        with "abort"."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join()

    @property
    def busy(self) -> int:
        with self._cv:
            return len(self._waiting) + len(self._prefilling) + len(self._running)

    # -- the loop ------------------------------------------------------------

    def _finish(self, req: Request, reason: str, error: str | None = None) -> None:
        """Ends `req` (called with the lock held or from the loop thread)."""
        if req.finish is not None:
            return
        req.finish, req.error = reason, error
        self.finished[reason] += 1
        if req.slot >= 0:
            slot = req.slot
            held = self._cached(slot) if self.reuse_prefixes and reason != "error" else _NOTHING
            del self._owner[slot]
            self._held[slot] = held
            self.session.release(slot, keep=held[2])
            self._held_at[slot] = self.session.slot_writes[slot]
            self._free.append(slot)
            req.slot = -1
        self._emit(req, [], reason)

    @staticmethod
    def _emit(req: Request, tokens: list[int], finish: str | None) -> None:
        try:
            req.on_output(req, tokens, finish)
        except Exception:  # noqa: BLE001 - a consumer's error must not stop the engine
            req.cancelled = True

    def _turn_start(self) -> bool:
        """Under the lock: waits for work, drops cancelled requests, admits
        waiting ones into free slots. False once closed."""
        with self._cv:
            while not self._closed and not (self._waiting or self._prefilling or self._running):
                self._cv.wait()
            if self._closed:
                for req in [*self._waiting, *self._prefilling, *self._running]:
                    self._finish(req, "abort")
                self._waiting.clear(), self._prefilling.clear(), self._running.clear()
                return False
            for queue in (self._waiting, self._prefilling):
                for req in [r for r in queue if r.cancelled]:
                    queue.remove(req)
                    self._finish(req, "abort")
            for req in [r for r in self._running if r.cancelled]:
                self._running.remove(req)
                self._finish(req, "abort")
            self._deferred = None
            while self._waiting and self._free:
                req = self._waiting[0]
                held = self._prompt_held(req)
                if self._waits_for_prefill(req, max(held)):
                    self._deferred = req  # (no launch ends early for it)
                    break
                slot, src, reuse = self._place(held)
                here = held[slot]
                if not self._back(slot, src, _positions(len(req.prompt), req.max_tokens)):
                    break  # it joins once running requests give pages back
                self._waiting.popleft()
                self._free.remove(slot)
                self._held[slot] = _NOTHING
                self._owner[slot] = req
                req.slot = slot
                if src >= 0:
                    try:
                        self.session.copy_positions(src, slot, here, reuse)
                    except Exception as err:  # noqa: BLE001 - reported to the request, the engine goes on
                        self._finish(req, "error", f"copying the prompt's cached positions failed: {err}")
                        continue
                req.fed = reuse
                self.prompts.add(len(req.prompt), reuse)
                if req.scoring:
                    # Decode steps feed the whole prompt, taking its tokens
                    # from the slot's history.
                    self.session.write_history(slot, req.prompt)
                    self._running.append(req)
                    continue
                # The last prompt token is fed by the decode launch.
                (self._prefilling if req.fed < len(req.prompt) - 1 else self._running).append(req)
            pool = self.session.kv_pages
            if pool is not None:
                self._room = pool.free + pool.reclaimable(self._free)
            return True

    def _cached(self, slot: int) -> tuple[np.ndarray, list[int], int]:
        """(prompt, tokens, n): slot `slot` holds the keys and values of
        the first n of the prompt's tokens followed by the tokens."""
        req = self._owner.get(slot)
        if req is None:
            # (Nothing if the session was used on this slot since.)
            return self._held[slot] if self.session.slot_writes[slot] == self._held_at[slot] else _NOTHING
        # The positions written: the prompt's fed part, then (decoding)
        # its last token and every new token but the last.
        return req.prompt_ids, req.tokens, req.fed + len(req.tokens)

    def _prompt_held(self, req: Request) -> list[int]:
        """Per cache slot, the positions of `req`'s prompt it holds (none
        without prefix reuse). The last prompt token is fed by the decode
        launch: at most the others are reused."""
        if not self.reuse_prefixes or req.scoring:
            return [0] * len(self._held)
        want = req.prompt_ids[:-1]
        return [_common(want, *self._cached(s)) for s in range(len(self._held))]

    def _place(self, held: list[int]) -> tuple[int, int, int]:
        """Where a request whose prompt the slots hold as `held`
        (`_prompt_held`) joins: (a free slot, the slot to copy cached
        positions from or -1, the prompt positions to reuse)."""
        if not self.reuse_prefixes:
            return self._free[0], -1, 0
        # The free slot that holds most of the prompt, else an empty one,
        # else the least recently freed.
        slot = max(self._free, key=lambda s: (held[s], self._cached(s)[2] == 0))
        # The slot that holds most (the first of those): copied from if
        # that is more than the free slot holds.
        src = max(range(len(held)), key=lambda s: held[s])
        if held[src] <= held[slot]:
            return slot, -1, held[slot]
        return slot, src, held[src]

    def _waits_for_prefill(self, req: Request, held: int) -> bool:
        """Whether `req`, of whose prompt a cache slot holds at most `held`
        positions, should wait for a prompt being fed that will hold
        PREFIX_WAIT or more positions of it, more than that (n choices of
        one prompt, a system prompt that requests arriving together
        share): it then copies them once they are in."""
        if not self.reuse_prefixes or not self._prefilling or req.scoring:
            return False
        want = req.prompt_ids[:-1]
        coming = max(_common(want, r.prompt_ids, [], len(r.prompt) - 1) for r in self._prefilling)
        return coming >= self.PREFIX_WAIT and coming > held

    def _back(self, slot: int, src: int, positions: int) -> bool:
        """Paged caches: backs every position the request in `slot` may
        write, giving back the pages of free slots other than `slot` and
        `src` (least recently freed first) if the pool needs them; False,
        giving back nothing, if even that would not do."""
        pool = self.session.kv_pages
        if pool is None:
            return True
        others = [s for s in self._free if s not in (slot, src) and pool.backed(s)]
        if pool.needed(slot, positions) > pool.free + pool.reclaimable(others):
            return False
        for victim in [None, *others]:
            if victim is not None:
                self.session.release(victim)
                self._held[victim] = _NOTHING
            try:
                pool.ensure(slot, positions)
                return True
            except KVCacheFull:
                continue
        return False

    def _loop(self) -> None:
        while self._turn_start():
            budget = self.prefill_budget
            # Prompt positions up to the turn's budget, oldest request first.
            for req in list(self._prefilling):
                if budget <= 0:
                    break
                budget -= self._prefill_part(req, budget)
            if self._running:
                self._decode()

    def _prefill_part(self, req: Request, budget: int) -> int:
        """Feeds the next part of `req`'s prompt but its last token (at most
        `budget` positions); returns the positions fed."""
        end = len(req.prompt) - 1
        try:
            fed, _ = self.session.prefill_part(req.slot, req.prompt[:end], req.fed, min(budget, end - req.fed))
        except Exception as err:  # noqa: BLE001 - reported to the request, the engine goes on
            with self._cv:
                self._prefilling.remove(req)
                self._finish(req, "error", f"prefill failed: {err}")
            return 0
        req.fed += fed
        if req.fed == end:
            with self._cv:
                self._prefilling.remove(req)
                if not req.cancelled:
                    self._running.append(req)
                else:
                    self._finish(req, "abort")
        return fed

    def _decode(self) -> None:
        rows = list(self._running)
        stops = np.stack([r.stop_ids for r in rows])
        # (A row scoring its prompt feeds the prompt token at `fed`; every
        # other has fed all but the last.)
        last = [r.tokens[-1] if r.tokens else r.prompt[r.fed] for r in rows]
        positions = [r.fed + len(r.tokens) for r in rows]
        remaining = [r.given() + r.max_tokens - len(r.tokens) for r in rows]
        # While prompts wait to be fed, launches stay short so that their
        # parts go in between; otherwise a launch runs until a request
        # could join or leave (`_interrupting`).
        steps = min(self.chunk, self.PREFILL_STEPS) if self._prefilling else self.chunk

        def stream(b, tokens):
            req = rows[b]
            # A scoring row's first tokens are its prompt's.
            given = req.given()
            req.fed += min(given, len(tokens))
            tokens = tokens[given:]
            if not tokens:
                return
            req.tokens += tokens
            if not req.cancelled:
                self._emit(req, tokens, None)

        def logprobs(b, entries):
            req = rows[b]
            given = req.given()
            if req.prompt_logprobs is not None:
                req.prompt_logprobs += entries[:given]
            if req.logprobs is not None:
                req.logprobs += entries[given:]
        start = time.perf_counter()
        try:
            sampling = {k: np.concatenate([r.sampling[k] for r in rows]) for k in rows[0].sampling}
            out = self.session.decode_launch([r.slot for r in rows], last, positions, remaining, stops, steps,
                                             sampling=sampling, on_tokens=stream, on_logprobs=logprobs,
                                             interrupt_when=self._interrupting)
        except Exception as err:  # noqa: BLE001 - every row of the launch fails; the engine goes on
            with self._cv:
                for req in rows:
                    self._running.remove(req)
                    self._finish(req, "error", f"decode launch failed: {err}")
            return
        self.launches += 1
        self.decode.add(positions, max(len(new) for new, _ in out), time.perf_counter() - start)
        for req, (_, code) in zip(rows, out):
            if code:
                with self._cv:
                    self._running.remove(req)
                    if code == FINISH_NONFINITE:
                        self._finish(req, "error", "the logits are NaN (or all -inf): check the weights")
                    else:
                        self._finish(req, _REASONS[code])

    def _interrupting(self) -> bool:
        """Whether the running launch should end early: a waiting request
        could take a free slot (and its KV pages; not one that waits for a
        prompt being fed: no prompt is fed during the launch), or a running
        one was cancelled."""
        with self._cv:
            head = self._waiting[0] if self._waiting else None
            return bool((head is not None and head is not self._deferred and self._free and self._fits(head))
                        or self._closed or any(r.cancelled for r in self._running))

    def _fits(self, req: Request) -> bool:
        pool = self.session.kv_pages
        return pool is None or pool.needed_alone(self._free[0], _positions(len(req.prompt), req.max_tokens)) <= self._room


class DecodeStats:
    """What the engine's decode launches did, for reading a serving run
    against the hardware: `steps` (a launch runs as many as its longest
    row made tokens), `row_steps` (rows x steps: every row of a launch
    runs each step), `kv_positions` (the cache positions those row-steps
    attended over) and `seconds` (wall clock of the launches, tokens
    handed out included). So `seconds / steps` is the step as served, and
    `row_steps / steps` and `kv_positions / steps` give what a step read
    beside the weights."""

    def __init__(self):
        self.launches = self.steps = self.row_steps = self.kv_positions = 0
        self.seconds = 0.0

    def add(self, positions, steps: int, seconds: float) -> None:
        """A launch of rows fed at `positions` that ran `steps` steps."""
        rows = len(positions)
        self.launches += 1
        self.steps += steps
        self.row_steps += rows * steps
        # Step s of row b attends over positions 0 .. positions[b] + s.
        self.kv_positions += steps * int(np.sum(positions)) + rows * steps * (steps + 1) // 2
        self.seconds += seconds

    def to_dict(self) -> dict:
        return {"launches": self.launches, "steps": self.steps, "row_steps": self.row_steps,
                "kv_positions": self.kv_positions, "seconds": self.seconds}


class PromptStats:
    """The prompts the engine admitted: `requests`, those that reused
    cached positions (`hits`), their `positions` (the last prompt token
    is fed by the decode launch: a prompt of n tokens has n - 1) and those
    of them `reused` from a cache slot instead of computed."""

    def __init__(self):
        self.requests = self.hits = self.positions = self.reused = 0

    def add(self, prompt: int, reused: int) -> None:
        self.requests += 1
        self.hits += reused > 0
        self.positions += prompt - 1
        self.reused += reused

    def to_dict(self) -> dict:
        return {"requests": self.requests, "hits": self.hits, "positions": self.positions, "reused": self.reused}


_NOTHING: tuple[np.ndarray, list[int], int] = (np.zeros(0, np.int64), [], 0)


def _common(want: np.ndarray, prompt: np.ndarray, tokens: list[int], n: int) -> int:
    """The length of the common prefix of `want` and the first n of
    `prompt` followed by `tokens`."""
    m = min(n, len(want))
    k = min(m, len(prompt))
    if m == 0 or prompt[0] != want[0]:
        return 0
    diff = np.flatnonzero(prompt[:k] != want[:k])
    if len(diff) or k == m:
        return int(diff[0]) if len(diff) else m
    diff = np.flatnonzero(np.asarray(tokens[: m - k], np.int64) != want[k:m])
    return k + (int(diff[0]) if len(diff) else m - k)


def _positions(prompt: int, max_tokens: int) -> int:
    """The cache positions a request writes at most: its prompt's and
    those of the new tokens fed back (all but the last)."""
    return prompt + max_tokens - 1
