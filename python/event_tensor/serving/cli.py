"""`event-tensor generate | serve`: text generation and the OpenAI-compatible
server over a Hugging Face model directory (see event_tensor/cli.py for
the parser)."""

from __future__ import annotations

import argparse
import sys
import threading

__all__ = ["add_commands"]


def _err(msg: str) -> int:
    print(f"event-tensor: error: {msg}", file=sys.stderr)
    return 2


def _open(args: argparse.Namespace):
    from ..model.cli import _device
    from .model import open_model

    device = _device(args.device)
    served = open_model(args.model_dir, device=device, max_batch=args.max_batch, max_context=args.max_context,
                        workers=args.workers, prefill_rows=args.prefill_rows, chunk=args.chunk,
                        cache_dir=args.cache_dir, tp=args.tp,
                        kv_memory=None if args.kv_memory is None else int(args.kv_memory * (1 << 30)),
                        gpu_memory_fraction=args.gpu_memory_fraction, reuse_prefixes=not args.no_prefix_reuse)
    print(f"{served.name}: {served.config.num_layers} layers on {device}"
          + (f" x {args.tp}" if args.tp > 1 else "") + f", max batch {args.max_batch}, context "
          f"{served.session.max_context}; ready in {served.start_s:.1f} s", file=sys.stderr)
    return served


def cmd_generate(args: argparse.Namespace) -> int:
    from ..model.cli import logit_kwargs, print_logprobs
    from .engine import SamplingParams
    from .text import StopStrings, TextError

    try:
        served = _open(args)
    except (ValueError, OSError) as err:
        return _err(str(err))
    try:
        codec = served.codec
        ids = codec.chat([{"role": "user", "content": args.prompt}]) if args.chat else codec.encode(args.prompt)
        params = SamplingParams(max_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed,
                                top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, **logit_kwargs(args))
        text, stops, done = codec.stream(ids), StopStrings(args.stop), threading.Event()
        state = {"finish": None, "error": None, "hit": False}

        def on_output(req, tokens, finish):
            if tokens and not state["hit"]:
                out, hit = stops.feed(text.push(tokens))
                sys.stdout.write(out)
                sys.stdout.flush()
                if hit:
                    state["hit"], state["finish"] = True, "stop"
                    served.engine.cancel(req)
            if finish is not None:
                if not state["hit"]:
                    sys.stdout.write(stops.flush())
                    state["finish"] = finish
                state["error"] = req.error
                done.set()
        req = served.engine.submit(ids, params, on_output)
        done.wait()
        sys.stdout.write("\n")
        if state["error"]:
            return _err(state["error"])
        if req.logprobs is not None:
            print_logprobs(req.tokens, req.logprobs, lambda t: repr(codec.decode([t])))
        print(f"({state['finish']})", file=sys.stderr)
    except (ValueError, TextError) as err:
        return _err(str(err))
    finally:
        served.close()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from .server import serve
    except ImportError as err:
        return _err(f"serving needs FastAPI and uvicorn ({err}); pip install fastapi uvicorn")
    try:
        served = _open(args)
    except (ValueError, OSError) as err:
        return _err(str(err))
    serve(served, host=args.host, port=args.port)
    return 0


def add_commands(sub) -> None:
    """Adds `generate` and `serve` to the CLI's subparsers."""
    from ..model.cli import _fraction, _positive_float, _positive_int, sampling_args

    def model_args(p):
        p.add_argument("model_dir", help="a Hugging Face model directory: config.json, *.safetensors, tokenizer.json "
                       "(and tokenizer_config.json for the chat template)")
        p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                       help="where to run: cpu (host worker threads), cuda, or auto (cuda when available)")
        p.add_argument("--max-batch", type=_positive_int, default=4, help="sequences served at once (default 4; up to 64, above 16 on cuda only)")
        p.add_argument("--max-context", type=_positive_int, default=None,
                       help="tokens per sequence, prompt and output (default 1024, or the model's "
                       "max_position_embeddings if smaller)")
        p.add_argument("--workers", type=_positive_int, help="persistent workers (default 132 on cuda; on cpu the available "
                       "cores, at least 4)")
        p.add_argument("--prefill-rows", type=int, default=None,
                       help="prompt positions per prefill launch (default 512 on cuda; 0: prompts go through "
                       "the decode kernel, the default on cpu)")
        p.add_argument("--chunk", type=_positive_int, default=256,
                       help="decode steps per launch at most (default 256): a launch also ends when a request "
                       "joins or leaves; tokens stream out as they are made")
        p.add_argument("--no-prefix-reuse", action="store_true",
                       help="compute every prompt whole (default: a prompt takes the keys and values of its first "
                       "tokens from a cache slot that holds them: a shared system prompt, earlier turns of a chat)")
        p.add_argument("--cache-dir", help="the compile cache (default: the user's cache directory)")
        p.add_argument("--tp", type=_positive_int, default=1,
                       help="split the model over this many GPUs (tensor parallelism; default 1)")
        pool = p.add_mutually_exclusive_group()
        pool.add_argument("--kv-memory", type=_positive_float, default=None, metavar="GIB",
                          help="page the KV caches: a pool of this many GiB (default: every sequence holds the "
                          "whole context); a request joins once the pool holds its prompt and max_tokens")
        pool.add_argument("--gpu-memory-fraction", type=_fraction, default=None, metavar="F",
                          help="page the KV caches with the pool that keeps the memory in use on each GPU at most "
                          "this fraction of it once the weights are loaded (the host's memory on cpu)")

    p = sub.add_parser("generate", help="generate text from a prompt with a Hugging Face model directory",
                       description="Tokenize the prompt with the model's tokenizer, generate on the compiled "
                       "megakernel (compiled into the cache on first use) and print the text as it comes.")
    model_args(p)
    p.add_argument("--prompt", required=True, help="the prompt text")
    p.add_argument("--chat", action="store_true", help="wrap the prompt as a user message in the chat template")
    p.add_argument("--max-new-tokens", type=_positive_int, default=64, help="new tokens at most (default 64)")
    sampling_args(p)
    p.add_argument("--stop", action="append", default=[], help="a stop string (repeatable; not printed)")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("serve", help="an OpenAI-compatible HTTP server over a Hugging Face model directory",
                       description="Serve /v1/completions, /v1/chat/completions (streaming as server-sent "
                       "events), /v1/models and /health, batching concurrent requests in one megakernel.")
    model_args(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.set_defaults(func=cmd_serve)
