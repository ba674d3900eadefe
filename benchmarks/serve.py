#!/usr/bin/env python3
"""Serving on a CUDA machine (no MLIR; an artifact compiled here, with a
prefill kernel and max_batch >= the largest concurrency): random bf16
weights, token-id prompts, wall clock on the host.

1. batch 1, one --prompt-token prompt, --new tokens (end ids ignored):
   - `decode_loop`: `DecodeSession.generate` (one launch for every step),
     decode seconds / (new - 1): the decode-loop benchmark's figure;
   - `engine_<k>`: the serving `Engine` with k decode steps per launch:
     time to first token from `submit` (a new random prompt each run:
     nothing cached to reuse), time per output token from the
     first token to the last (callbacks' arrival times);
   - `http_<k>`: the same through the OpenAI-compatible server (uvicorn in
     this process, a streamed /v1/completions over httpx), from the request
     to each server-sent event (with --http; needs fastapi and uvicorn).
2. concurrency c (--concurrency): c clients, each sending its next request
   when the last one ended, --requests in all; prompt lengths drawn from
   64..--max-prompt, outputs from 64..--max-new (a chat-like mix): time to
   first token and time per output token (p50, p99) and output tokens per
   second, through the engine; and its decode steps against the hardware
   (the engine's `DecodeStats`): the step as served (launch wall clock
   over steps), the mean rows and cache positions a step read, and the
   floor of those bytes (weights + KV) over the copy bandwidth. With
   --shared-prefix N every prompt starts with the same N tokens (a system
   prompt; prompt lengths are drawn past it) and each concurrency runs
   twice, the engine reusing cached prefixes and not (`reuse_prefixes`);
   the rows record the prompt positions reused.
3. the peer, transformers + torch.compile(reduce-overhead) with a static
   cache, in the same process: static batches (--peer-batches) of
   --prompt / --new, time to first token (the prefill), time per output
   token and output tokens per second.
The bandwidth floor of a step (weight bytes / copy bandwidth) is printed
beside. With --kv-memory GiB the session's KV caches are paged (a pool of
that many bytes, `DecodeSession(kv_memory=...)`): the pool's pages and the
most of them in use during each concurrency run are recorded.

    PYTHONPATH=python:benchmarks python3 benchmarks/serve.py .device/serve/llama-3.2-1b --json results.json
"""

import argparse
import json
import threading
import time
from pathlib import Path

import numpy as np
import torch

from event_tensor.model import DecodeSession, ModelConfig
from event_tensor.serving import Engine, SamplingParams
from gpu_timing import copy_bandwidth, kv_bytes, random_model_weights, to_numpy_bf16


def run_one(engine, prompt, new, t0=None):
    """Submits one request; returns (ttft s, tpot s, tokens) once it ends."""
    times, count, done = [], [0], threading.Event()

    def on_output(req, tokens, finish):
        if tokens:
            now = time.perf_counter()
            times.append((now, len(tokens)))
            count[0] += len(tokens)
        if finish is not None:
            done.set()
    start = time.perf_counter() if t0 is None else t0
    engine.submit(prompt, SamplingParams(max_tokens=new, ignore_eos=True), on_output)
    done.wait()
    first, last = times[0][0], times[-1][0]
    # The first launch's tokens arrive together: the first one at `first`.
    return first - start, (last - first) / max(count[0] - times[0][1], 1) if len(times) > 1 else 0.0, count[0]


def http_one(client, url, prompt, new):
    """A streamed completion over `client` (an httpx.Client, made before:
    making one takes tens of milliseconds): (ttft s, tpot s, tokens); the
    stand-in tokenizer's words count the tokens of each event."""
    body = {"model": "bench", "prompt": prompt, "max_tokens": new, "stream": True, "ignore_eos": True,
            "temperature": 0}
    stamps = []
    start = time.perf_counter()
    with client.stream("POST", url + "/v1/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                if event["choices"] and event["choices"][0]["text"]:
                    stamps.append((time.perf_counter(), len(event["choices"][0]["text"].split())))
    tokens = sum(n for _, n in stamps)
    tpot = (stamps[-1][0] - stamps[0][0]) / max(tokens - stamps[0][1], 1) if len(stamps) > 1 else 0.0
    return stamps[0][0] - start, tpot, tokens


def word_codec(vocab: int, where: Path):
    """A stand-in tokenizer: id i is the word "t<i>" (a WordLevel model of
    the whole vocabulary), so that every token decodes to text."""
    from tokenizers import Tokenizer, models

    from event_tensor.serving import TextCodec

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    return TextCodec(where, tokenizer=tok)


def percentile(values, q):
    return float(np.percentile(values, q)) if values else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("artifact")
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--chunks", default="32,256", help="the engine's most steps per launch")
    parser.add_argument("--mix-chunk", type=int, default=256, help="most steps per launch of the concurrency runs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--concurrency", default="1,4,8")
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--max-prompt", type=int, default=1024)
    parser.add_argument("--max-new", type=int, default=256)
    parser.add_argument("--shared-prefix", type=int, default=0,
                        help="the concurrency runs' prompts start with the same this many tokens; each runs with "
                        "and without prefix reuse")
    parser.add_argument("--peer-batches", default="1,8",
                        help="transformers + torch.compile static batches of --prompt / --new ('' for none)")
    parser.add_argument("--check-batch", type=int, default=0,
                        help="first compare the logits of this many rows in one step with each row alone")
    parser.add_argument("--kv-memory", type=float, default=None, help="paged KV caches: the pool in GiB")
    parser.add_argument("--json")
    args = parser.parse_args()

    path = Path(args.artifact)
    config = ModelConfig.from_dict(json.loads((path / "model.json").read_text())["config"])
    weights = random_model_weights(config, seed=0)
    kv_memory = None if args.kv_memory is None else int(args.kv_memory * (1 << 30))
    session = DecodeSession(path, to_numpy_bf16(weights), kv_memory=kv_memory)
    gpu = torch.cuda.get_device_name()
    bandwidth = copy_bandwidth()
    result = {"artifact": path.name, "gpu": gpu, "max_batch": session.max_batch, "prompt": args.prompt,
              "new": args.new, "copy_GBps": bandwidth / 1e9,
              "floor_ms": 1e3 * config.weight_bytes() / bandwidth,
              "kv_whole_bytes": 2 * 2 * int(np.prod(session.buffers["k_cache"].shape))}
    pool = session.kv_pages
    if pool is not None:
        result["kv_pages"] = {"budget": pool.budget, "page_bytes": pool.page_bytes,
                              "page_tokens": pool.page_tokens(), "bytes": pool.budget * pool.page_bytes * 2}
    rng = np.random.default_rng(0)
    if args.check_batch:
        # The logits of a batch's rows against each row alone (another
        # kernel variant at batch 1): the relative error.
        n = min(args.check_batch, session.max_batch)
        tokens = rng.integers(0, config.vocab_size, n)
        session.step(tokens, [0] * n, list(range(n)))
        together = session.last_logits()
        alone = []
        for b in range(n):
            session.step(tokens[b:b + 1], [0], [b])
            alone.append(session.last_logits()[0])
        alone = np.stack(alone)
        result["check_batch"] = {"batch": n, "variant": Path(session.variant_for(n, 1)).name,
                                 "relative_error": float(np.abs(together - alone).max() / np.abs(alone).max())}
        print(json.dumps(result["check_batch"]), flush=True)
    prompt = rng.integers(0, config.vocab_size, args.prompt).tolist()
    session.generate([prompt], 8)
    loop = []
    for _ in range(args.repeats):
        session.reset()
        loop.append(session.generate([prompt], args.new).decode_s / (args.new - 1))
    result["decode_loop_ms"] = 1e3 * float(np.median(loop))
    result["decode_loop_tokens"] = session.generate([prompt], 32).tokens[0]
    print(json.dumps(result), flush=True)
    for k in [int(c) for c in args.chunks.split(",") if c]:
        engine = Engine(session, chunk=k)
        run_one(engine, prompt, 16)  # warm-up
        runs = [run_one(engine, rng.integers(0, config.vocab_size, args.prompt).tolist(), args.new)
                for _ in range(args.repeats)]
        result[f"engine_{k}"] = {"ttft_ms": 1e3 * float(np.median([r[0] for r in runs])),
                                 "tpot_ms": 1e3 * float(np.median([r[1] for r in runs])),
                                 "tokens": runs[0][2]}
        if args.http:
            import uvicorn

            from event_tensor.serving.model import ServedModel
            from event_tensor.serving.server import create_app

            served = ServedModel("bench", config, session, word_codec(config.vocab_size, path), engine, 0.0)
            server = uvicorn.Server(uvicorn.Config(create_app(served), host="127.0.0.1", port=18431,
                                                   log_level="warning"))
            thread = threading.Thread(target=server.run, daemon=True)
            thread.start()
            while not server.started:
                time.sleep(0.05)
            import httpx

            url, client = "http://127.0.0.1:18431", httpx.Client(timeout=600)
            http_one(client, url, prompt, 16)
            runs = [http_one(client, url, prompt, args.new) for _ in range(args.repeats)]
            client.close()
            result[f"http_{k}"] = {"ttft_ms": 1e3 * float(np.median([r[0] for r in runs])),
                                   "tpot_ms": 1e3 * float(np.median([r[1] for r in runs])),
                                   "tokens": runs[0][2]}
            server.should_exit = True
            thread.join()
        print(json.dumps({key: result[key] for key in result if key.endswith(f"_{k}")}), flush=True)
        if k == args.mix_chunk:
            mix = []
            system = rng.integers(0, config.vocab_size, args.shared_prefix).tolist()
            for c, reuse in [(int(x), r) for x in args.concurrency.split(",") if x
                             for r in ([True, False] if args.shared_prefix else [True])]:
                if c > session.max_batch:
                    continue
                if reuse:
                    draws = [(system + rng.integers(0, config.vocab_size, int(rng.integers(
                        64, max(args.max_prompt - len(system), 64) + 1))).tolist(),
                        int(rng.integers(64, args.max_new + 1))) for _ in range(args.requests)]
                todo = list(draws)
                engine.reuse_prefixes = reuse
                prompts_before = engine.prompts.to_dict()
                lock, out = threading.Lock(), []

                def client():
                    while True:
                        with lock:
                            if not todo:
                                return
                            p, n = todo.pop()
                        out.append(run_one(engine, p, n))
                most, watching = [0], [True]

                def watch():
                    while watching[0]:
                        most[0] = max(most[0], pool.used)
                        time.sleep(0.005)
                watcher = threading.Thread(target=watch) if pool is not None else None
                if watcher:
                    watcher.start()
                before = engine.decode.to_dict()
                start = time.perf_counter()
                clients = [threading.Thread(target=client) for _ in range(c)]
                for t in clients:
                    t.start()
                for t in clients:
                    t.join()
                wall = time.perf_counter() - start
                watching[0] = False
                if watcher:
                    watcher.join()
                row = {"concurrency": c, "requests": len(out), "wall_s": wall,
                       "shared_prefix": len(system), "reuse_prefixes": reuse,
                       "prompt_positions_reused": engine.prompts.reused - prompts_before["reused"],
                       "prompt_positions": engine.prompts.positions - prompts_before["positions"],
                       "ttft_p50_ms": 1e3 * percentile([r[0] for r in out], 50),
                       "ttft_p99_ms": 1e3 * percentile([r[0] for r in out], 99),
                       "tpot_p50_ms": 1e3 * percentile([r[1] for r in out], 50),
                       "tpot_p99_ms": 1e3 * percentile([r[1] for r in out], 99),
                       "output_tokens_per_s": sum(r[2] for r in out) / wall}
                run = {k: v - before[k] for k, v in engine.decode.to_dict().items()}
                if run["steps"]:
                    rows, context = run["row_steps"] / run["steps"], run["kv_positions"] / run["row_steps"]
                    floor = (config.weight_bytes() + kv_bytes(config, 1, 1) * run["kv_positions"] / run["steps"]) \
                        / bandwidth
                    step = run["seconds"] / run["steps"]
                    row.update({"decode_steps": run["steps"], "step_ms": 1e3 * step, "step_rows": rows,
                                "step_context": context, "step_floor_ms": 1e3 * floor,
                                "step_fraction_of_floor": floor / step})
                if pool is not None:
                    row["kv_pages_most"] = most[0]
                print(json.dumps(row), flush=True)
                mix.append(row)
            result["concurrency"] = mix
        engine.close()
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
    session.close()
    del session
    torch.cuda.empty_cache()
    peers = []
    for b in [int(x) for x in args.peer_batches.split(",") if x]:
        from hf_models import PeerGenerator

        prompts = torch.tensor(rng.integers(0, config.vocab_size, (b, args.prompt)).tolist())
        peer = PeerGenerator(config, weights, prompts, args.new, compiled=True)
        peer.generate()  # compilation and graph capture
        runs = [peer.generate() for _ in range(args.repeats)]
        prefill = float(np.median([r[1] for r in runs]))
        decode = float(np.median([r[2] for r in runs]))
        peers.append({"batch": b, "ttft_ms": 1e3 * prefill, "tpot_ms": 1e3 * decode / (args.new - 1),
                      "output_tokens_per_s": b * args.new / (prefill + decode)})
        print(json.dumps({"peer": peers[-1]}), flush=True)
        del peer
        torch.cuda.empty_cache()
    result["peer"] = peers
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
