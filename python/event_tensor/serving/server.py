"""An OpenAI-compatible HTTP API over a `ServedModel` (FastAPI + uvicorn):
`/v1/completions`, `/v1/chat/completions` (both with `stream: true` as
server-sent events), `/v1/models`, `/health`.

Each request goes to the engine's thread; its tokens come back through an
asyncio queue, are detokenized as they arrive and checked for stop
strings. A client that goes away cancels its request, which frees its
KV-cache slot at the engine's next turn. Errors are OpenAI's error objects:
400 for a request this model cannot serve (named field and value), 404 for
another model's name, 503 when the wait queue is full."""

# No `from __future__ import annotations`: FastAPI reads the handlers'
# annotations, which name the request models built inside `create_app`.

import asyncio
import json
import time
import uuid
from typing import Any, AsyncIterator, Literal

from ..model.layout import MAX_TOP_LOGPROBS
from .engine import EngineClosed, QueueFull, SamplingParams
from .text import StopStrings, TextError

__all__ = ["create_app", "serve"]


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind


def _models():
    """The request bodies (pydantic), built on first use so that importing
    this module needs no web stack."""
    from pydantic import BaseModel, ConfigDict

    class _Base(BaseModel):
        model_config = ConfigDict(extra="allow")
        model: str
        max_tokens: int | None = None
        temperature: float | None = None
        top_p: float | None = None
        top_k: int | None = None
        min_p: float | None = None
        frequency_penalty: float | None = None
        presence_penalty: float | None = None
        repetition_penalty: float | None = None
        logit_bias: dict[str, float] | None = None
        n: int | None = None
        stop: str | list[str] | None = None
        seed: int | None = None
        stream: bool = False
        stream_options: dict[str, Any] | None = None
        stop_token_ids: list[int] | None = None
        ignore_eos: bool = False

    class Completion(_Base):
        prompt: str | list[int] | list[str] | list[list[int]]
        max_tokens: int | None = 16
        echo: bool = False
        logprobs: int | None = None

    class Message(BaseModel):
        model_config = ConfigDict(extra="allow")
        role: Literal["system", "user", "assistant", "tool", "developer"]
        content: str | list[dict[str, Any]] | None = None

    class Chat(_Base):
        messages: list[Message]
        max_completion_tokens: int | None = None
        logprobs: bool | None = None
        top_logprobs: int | None = None

    return Completion, Chat


# Fields of the OpenAI API that change what is generated and that this
# server does not implement: a request that sets one to anything but its
# neutral value is refused (HTTP 400 naming it) rather than answered as if
# it were not there. (Other unknown fields, `user` say, are ignored.)
_UNSUPPORTED = {
    "best_of": (1,),
    "suffix": ("",),
    "tools": ([],),
    "functions": ([],),
    "response_format": ({"type": "text"},),
    "guided_json": (),
    "guided_regex": (),
    "guided_choice": (),
}


def _choices(body, served) -> int:
    """The choices a request asks for (`n`): at most the engine's cache
    slots, each an engine request of its own (the prompt's keys and values
    are computed once and copied: prefix reuse)."""
    n = 1 if body.n is None else body.n
    most = served.session.max_batch
    if not 1 <= n <= most:
        raise APIError(400, f"n must be between 1 and this server's max batch ({most}), got {n}", "n")
    return n


def _logprobs(body) -> int | None:
    """The top ids a request asks for with each token's log-probability
    (completions: `logprobs`; chat: `top_logprobs` with `logprobs` true), or
    None."""
    if hasattr(body, "top_logprobs"):
        top = body.top_logprobs
        if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
            raise APIError(400, f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {top}", "top_logprobs")
        if not body.logprobs:
            if top:
                raise APIError(400, "top_logprobs needs logprobs: true", "top_logprobs")
            return None
        return top or 0
    if body.logprobs is not None and not 0 <= body.logprobs <= MAX_TOP_LOGPROBS:
        raise APIError(400, f"logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {body.logprobs}", "logprobs")
    return body.logprobs


def _params(body, max_tokens: int | None, choice: int = 0) -> SamplingParams:
    """The engine's sampling parameters of a request body's choice `choice`
    (choice i draws with `seed` + i), or an APIError naming the field this
    server does not take."""
    extra = body.model_extra or {}
    for name, neutral in _UNSUPPORTED.items():
        value = extra.get(name)
        if value is not None and value not in neutral:
            raise APIError(400, f"{name} is not supported by this server (got {value!r})", name)
    temperature = 1.0 if body.temperature is None else body.temperature
    if not 0 <= temperature <= 100:
        raise APIError(400, f"temperature must be in [0, 100], got {temperature}", "temperature")
    if body.top_k is not None and body.top_k < -1:
        raise APIError(400, f"top_k must be -1 or 0 (off) or a positive number of tokens, got {body.top_k}", "top_k")
    for name in ("frequency_penalty", "presence_penalty"):
        value = getattr(body, name)
        if value is not None and not -2 <= value <= 2:
            raise APIError(400, f"{name} must be in [-2, 2], got {value}", name)
    repetition = 1.0 if body.repetition_penalty is None else body.repetition_penalty
    if not 0 < repetition <= 100:
        raise APIError(400, f"repetition_penalty must be in (0, 100], got {repetition}", "repetition_penalty")
    bias = {}
    for key, value in (body.logit_bias or {}).items():
        try:
            token = int(key)
        except ValueError:
            raise APIError(400, f"logit_bias keys must be token ids, got {key!r}", "logit_bias") from None
        if not -100 <= value <= 100:
            raise APIError(400, f"logit_bias values must be in [-100, 100], got {value} for token {key}",
                           "logit_bias")
        if token in bias:
            raise APIError(400, f"logit_bias names token {token} twice", "logit_bias")
        bias[token] = float(value)
    seed = None if body.seed is None else (body.seed + choice) % (1 << 64)
    logprobs = _logprobs(body)
    return SamplingParams(max_tokens=max_tokens, temperature=float(temperature), seed=seed,
                          top_k=max(body.top_k or 0, 0), top_p=1.0 if body.top_p is None else float(body.top_p),
                          min_p=float(body.min_p or 0.0), repetition_penalty=float(repetition),
                          frequency_penalty=float(body.frequency_penalty or 0.0),
                          presence_penalty=float(body.presence_penalty or 0.0), logit_bias=bias or None,
                          logprobs=logprobs, prompt_logprobs=logprobs if getattr(body, "echo", False) else None,
                          stop_ids=tuple(body.stop_token_ids or ()),
                          ignore_eos=body.ignore_eos)


def _stops(body) -> list[str]:
    stops = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    if len(stops) > 16:
        raise APIError(400, f"at most 16 stop strings, got {len(stops)}", "stop")
    return stops


class _Generation:
    """One request in flight: the engine's tokens (and their `Logprob`s, if
    it asked) through an asyncio queue, detokenized and cut at a stop
    string."""

    def __init__(self, served, prompt: list[int], params: SamplingParams, stops: list[str]):
        self.served = served
        self.prompt = prompt
        self.queue: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        self.text = served.codec.stream(prompt)
        self.stops = StopStrings(stops)
        self.tokens = 0
        self.finish: str | None = None

        def on_output(req, tokens, finish):
            # (The engine has put the tokens' Logprobs in place.)
            entries = list(zip(tokens, req.logprobs[len(req.logprobs) - len(tokens):])) \
                if req.logprobs is not None and tokens else []
            loop.call_soon_threadsafe(self.queue.put_nowait, (list(tokens), finish, req.error, entries))
        try:
            self.req = served.engine.submit(prompt, params, on_output)
        except QueueFull as err:
            raise APIError(503, str(err), kind="server_overloaded") from None
        except EngineClosed as err:
            raise APIError(503, str(err), kind="server_shutting_down") from None
        except ValueError as err:
            raise APIError(400, str(err)) from None

    async def pieces(self) -> AsyncIterator[tuple[str, list]]:
        """The text as it comes, each piece with the (token, Logprob) pairs
        of the tokens that came with it (none unless the request asked;
        a piece may be empty where text is held back); `finish` is set
        when it ends."""
        try:
            while self.finish is None:
                tokens, finish, error, entries = await self.queue.get()
                if tokens:
                    self.tokens += len(tokens)
                    if entries and self.stops.stops:
                        # Token by token, so that a stop string's hit keeps
                        # the entries of the tokens up to the one that ends it.
                        text, hit, kept = "", False, 0
                        for token in tokens:
                            piece, hit = self.stops.feed(self.text.push([token]))
                            text, kept = text + piece, kept + 1
                            if hit:
                                break
                        entries = entries[:kept]
                    else:
                        text, hit = self.stops.feed(self.text.push(tokens))
                    if text or entries:
                        yield text, entries
                    if hit:
                        self.finish = "stop"
                        break
                if finish == "error":
                    raise APIError(500, error or "the generation failed", kind="server_error")
                if finish is not None:
                    self.finish = finish
                    rest = self.stops.flush()
                    if rest:
                        yield rest, []
        finally:
            # A stop string, or the client went away: free the slot.
            self.cancel()

    def cancel(self) -> None:
        if self.req.finish is None:
            self.served.engine.cancel(self.req)


def _generations(served, prompt: list[int], body, max_tokens: int | None) -> list[_Generation]:
    """The request's choices, submitted to the engine; if one is refused,
    those before it are cancelled."""
    n, stops = _choices(body, served), _stops(body)
    params = [_params(body, max_tokens, i) for i in range(n)]
    gens: list[_Generation] = []
    try:
        for p in params:
            gens.append(_Generation(served, prompt, p, stops))
    except APIError:
        for g in gens:
            g.cancel()
        raise
    return gens


def _usage(gens: list[_Generation]) -> dict[str, int]:
    prompt, completion = len(gens[0].prompt), sum(g.tokens for g in gens)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _completion_logprobs(codec, entries: list, offset: int) -> dict:
    """The completions API's `logprobs` of (token, Logprob) pairs: each
    token's text, its log-probability, the most likely ids' texts with
    theirs (the token's own among them, as the API does), and each
    token's offset in the completion's text (from `offset`)."""
    texts = [codec.decode([t]) for t, _ in entries]
    offsets = []
    for text in texts:
        offsets.append(offset)
        offset += len(text)
    tops = []
    for (t, e), text in zip(entries, texts):
        top = {codec.decode([i]): lp for i, lp in e.top}
        top.setdefault(text, e.logprob)
        tops.append(top)
    return {"tokens": texts, "token_logprobs": [e.logprob for _, e in entries], "top_logprobs": tops,
            "text_offset": offsets}


def _prompt_logprobs(codec, ids: list[int], entries: list) -> dict:
    """The completions API's `logprobs` of an echoed prompt: its first
    token's text with null log-probabilities, then each later token's
    (`entries`, a Logprob each)."""
    first = codec.decode(ids[:1])
    rest = _completion_logprobs(codec, list(zip(ids[1:], entries)), len(first))
    return {"tokens": [first, *rest["tokens"]], "token_logprobs": [None, *rest["token_logprobs"]],
            "top_logprobs": [None, *rest["top_logprobs"]], "text_offset": [0, *rest["text_offset"]]}


def _chat_logprobs(codec, entries: list) -> dict:
    """The chat API's `logprobs` of (token, Logprob) pairs: per token its
    text, UTF-8 bytes and log-probability, and the most likely ids'."""
    def item(t, lp):
        text = codec.decode([t])
        return {"token": text, "logprob": lp, "bytes": list(text.encode())}
    return {"content": [{**item(t, e.logprob), "top_logprobs": [item(i, lp) for i, lp in e.top]}
                        for t, e in entries]}


def _sse(data) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def create_app(served):
    """The FastAPI application serving `served` (a `ServedModel`)."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse

    Completion, Chat = _models()
    app = FastAPI(title="EventTensor", description="An OpenAI-compatible API over one EventTensor megakernel")
    created = int(time.time())

    def error(status: int, message: str, param=None, kind="invalid_request_error"):
        return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}},
                            status_code=status)

    @app.exception_handler(APIError)
    async def api_error(_, err: APIError):
        return error(err.status, err.message, err.param, err.kind)

    @app.exception_handler(RequestValidationError)
    async def invalid(_, err: RequestValidationError):
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return error(400, f"{where or 'body'}: {first.get('msg', 'invalid request')}", where or None)

    def check_model(name: str):
        if name != served.name:
            raise APIError(404, f"the model `{name}` does not exist (this server serves `{served.name}`)", "model",
                           kind="model_not_found")

    @app.get("/health")
    async def health():
        engine = served.engine
        return {"status": "ok", "model": served.name, "requests": engine.busy, "launches": engine.launches,
                "finished": dict(engine.finished), "decode": engine.decode.to_dict(),
                "prompts": engine.prompts.to_dict()}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": served.name, "object": "model", "created": created,
                                            "owned_by": "event-tensor",
                                            "max_model_len": served.session.max_context}]}

    async def run(gens: list[_Generation], stream: bool, body, chunk, final):
        """The response of the choices `gens`: one JSON object
        (`final(texts, finishes, entries, usage)`), or server-sent events of
        `chunk(i, text, finish, entries)` objects as each choice's text
        comes, each choice's last with its finish reason, then, if asked,
        usage (`entries`: the (token, Logprob) pairs of the text's tokens,
        if the request asked for log-probabilities)."""
        async def collect(gen):
            texts, entries = [], []
            async for text, got in gen.pieces():
                texts.append(text)
                entries += got
            return "".join(texts), entries
        if not stream:
            tasks = [asyncio.ensure_future(collect(g)) for g in gens]
            try:
                done = await asyncio.gather(*tasks)
            finally:
                for t in tasks:
                    t.cancel()
                for g in gens:
                    g.cancel()
            return final([t for t, _ in done], [g.finish for g in gens], [e for _, e in done], _usage(gens))

        async def events():
            queue: asyncio.Queue = asyncio.Queue()

            async def feed(i, gen):
                try:
                    async for piece, entries in gen.pieces():
                        await queue.put((i, piece, entries, None, None))
                    await queue.put((i, "", [], gen.finish, None))
                except APIError as err:
                    await queue.put((i, "", [], None, err))
            tasks = [asyncio.ensure_future(feed(i, g)) for i, g in enumerate(gens)]
            try:
                for _ in gens:
                    while True:
                        i, text, entries, finish, err = await queue.get()
                        if err is not None:
                            raise err
                        yield _sse(chunk(i, text, finish, entries))
                        if finish is not None:
                            break
                if (body.stream_options or {}).get("include_usage"):
                    yield _sse({**chunk(0, "", None, []), "choices": [], "usage": _usage(gens)})
            except APIError as err:
                yield _sse({"error": {"message": err.message, "type": err.kind, "code": err.status}})
            finally:
                for t in tasks:
                    t.cancel()
                for g in gens:
                    g.cancel()
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(body: Completion, request: Request):
        check_model(body.model)
        prompt = body.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            # A batch of prompts (texts, or token ids as clients that
            # tokenize send them) of one.
            if len(prompt) != 1:
                raise APIError(400, f"one prompt per request, got {len(prompt)}", "prompt")
            prompt = prompt[0]
        ids = served.codec.encode(prompt) if isinstance(prompt, str) else list(prompt)
        gens = _generations(served, ids, body, body.max_tokens)
        rid, now = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        head = {"id": rid, "object": "text_completion", "created": now, "model": served.name}

        asked = body.logprobs is not None
        # With echo, each choice's text starts with the prompt's (and, with
        # logprobs, its log-probabilities with the prompt's tokens').
        echo = (prompt if isinstance(prompt, str) else served.codec.decode(ids)) if body.echo else ""
        echoed: set[int] = set()
        offsets = [len(echo)] * len(gens)  # where each choice's next token's text starts (text_offset)

        def choice(i, text, finish, entries):
            head = None
            if i not in echoed:
                echoed.add(i)
                text = echo + text
                if asked and body.echo:
                    head = _prompt_logprobs(served.codec, ids, gens[i].req.prompt_logprobs)
            logprobs = _completion_logprobs(served.codec, entries, offsets[i]) if asked else None
            if logprobs is not None and entries:
                offsets[i] = logprobs["text_offset"][-1] + len(logprobs["tokens"][-1])
            if head is not None:
                logprobs = {k: head[k] + logprobs[k] for k in head}
            return {"index": i, "text": text, "logprobs": logprobs, "finish_reason": finish}

        def chunk(i, text, finish, entries):
            return {**head, "choices": [choice(i, text, finish, entries)]}

        def final(texts, finishes, entries, usage):
            return {**head, "choices": [choice(i, t, f, e) for i, (t, f, e) in enumerate(zip(texts, finishes, entries))],
                    "usage": usage}
        return await run(gens, body.stream, body, chunk, final)

    @app.post("/v1/chat/completions")
    async def chat(body: Chat, request: Request):
        check_model(body.model)
        messages = []
        for m in body.messages:
            content = m.content
            if isinstance(content, list):
                # Content parts: the text ones.
                if any(part.get("type") != "text" for part in content):
                    raise APIError(400, "only text content parts are supported", "messages")
                content = "".join(str(part.get("text", "")) for part in content)
            messages.append({**m.model_dump(exclude_none=True), "content": content or ""})
        try:
            ids = served.codec.chat(messages)
        except TextError as err:
            raise APIError(400, str(err), "messages") from None
        max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        gens = _generations(served, ids, body, max_tokens)
        rid, now = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        head = {"id": rid, "object": "chat.completion.chunk", "created": now, "model": served.name}
        started: set[int] = set()

        asked = bool(body.logprobs)

        def logprobs(entries):
            return _chat_logprobs(served.codec, entries) if asked else None

        def chunk(i, text, finish, entries):
            # Each choice's first delta names the role.
            delta = {"role": "assistant", "content": text} if i not in started else ({"content": text} if text else {})
            started.add(i)
            return {**head, "choices": [{"index": i, "delta": delta, "logprobs": logprobs(entries),
                                         "finish_reason": finish}]}

        def final(texts, finishes, entries, usage):
            return {**head, "object": "chat.completion",
                    "choices": [{"index": i, "message": {"role": "assistant", "content": t}, "logprobs": logprobs(e),
                                 "finish_reason": f} for i, (t, f, e) in enumerate(zip(texts, finishes, entries))],
                    "usage": usage}
        return await run(gens, body.stream, body, chunk, final)

    return app


def serve(served, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    """Runs the API on `host:port` until interrupted, then closes the model."""
    import uvicorn

    try:
        uvicorn.run(create_app(served), host=host, port=port, log_level=log_level)
    finally:
        served.close()
