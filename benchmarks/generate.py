#!/usr/bin/env python3
"""Generation on a CUDA machine: wall-clock time per output token of a real
greedy generation loop (no MLIR; artifacts compiled here, for example by
utils/prepare_variants.py with a prefill kernel and a context that holds the
prompt and the new tokens).

For each artifact and batch: random bf16 weights, random prompts of
--prompt tokens, then --new tokens per row, timed on the host from the first
token (the prefill's) to the last one in host memory, so per output token:
decode seconds / (new - 1); a sampled or penalized generation takes its
first token from the decode kernel too (its prompt's last token fed there),
so its decode seconds cover `new` steps and count / new. Ways, in the same
process:

- `device`: `DecodeSession.generate`: one launch runs every decode step, the
  kernel feeding each row's token back (steps on the device);
- `stream_<k>`: `DecodeSession.stream(chunk=k)`: launches of k steps, the
  tokens handed out as the kernel makes them (--chunks);
- `sampled`: `generate` at --temperature (Gumbel-max sampling in the kernel),
  with the --filters (top_k, top_p, min_p: `et.sample_threshold`) if given;
- `penalized`: `generate` greedy with the --penalties (repetition,
  frequency, presence: `et.penalize` over each row's history; a
  `logit_bias` of token ids to numbers: `et.logit_bias`), and a check
  of its first --check-tokens tokens of row 0 against the numpy reference
  applied to the raw logits of one `step()` per token (agreement counted
  where the top two penalized logits are apart);
- `logprobs`: `generate` greedy with --logprobs top ids per token
  (`et.top_logprobs` in each row's filter tile), whether its tokens equal
  the plain run's, and a check of row 0's first --check-tokens entries
  against the reference's log-softmax of the raw logits of one `step()` per
  token (worst error of the token's and the top ids' log-probabilities, top
  id lists that agree);
- `host_loop`: `DecodeSession.step` per token, the host feeding the token
  back (one launch, copies and a synchronization per token);
- `peer`: transformers + torch.compile(mode="reduce-overhead") with a static
  cache, argmax fed back on the device (--peer compiled; '' for none).

Also the kernel-only time of one step (CUDA events around one launch, at the
middle of the generated positions) as the reference point, the host
overhead per token (device wall minus kernel-only), and whether the device
path's tokens equal the host loop's (greedy, same weights).

    PYTHONPATH=python:benchmarks python3 benchmarks/generate.py .device/gen --json results.json
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from event_tensor.model import DecodeSession, ModelConfig
from event_tensor.reference import logit_bias, penalize, top_logprobs
from gpu_timing import launch_seconds, random_model_weights, to_numpy_bf16


def host_loop(session: DecodeSession, prompts: list, new: int) -> tuple[list, float]:
    """Greedy tokens [batch][new] and decode seconds, one launch per token."""
    session.reset()
    nxt = session.prefill(prompts)
    out = [nxt]
    start = time.perf_counter()
    for s in range(new - 1):
        nxt = session.step(nxt, [len(prompts[0]) + s] * len(prompts))
        out.append(nxt)
    seconds = time.perf_counter() - start
    return np.stack(out, 1).tolist(), seconds


def kernel_seconds(session: DecodeSession, batch: int, position: int, iters: int) -> float:
    tokens = np.arange(batch) % session.config.vocab_size
    session.step(tokens, [position] * batch)
    return launch_seconds(session.launcher, *session._arguments(batch), reps=iters)


def raw_steps(session: DecodeSession, prompt: list, tokens: list):
    """For each of `tokens` (generated after `prompt`): the sequence before
    it and the raw logits of one step() (greedy, nothing applied) at its
    position, the sequence fed token by token."""
    session.reset()
    session.prefill([prompt[:-1]])
    seq = list(prompt)
    for token in tokens:
        session.step([seq[-1]], [len(seq) - 1], [0])
        yield seq, session.last_logits()[0].astype(np.float64)
        seq.append(token)


def penalty_check(session: DecodeSession, prompt: list, tokens: list, penalties: dict) -> dict:
    """Each of `tokens` (generated after `prompt` with `penalties`) against
    the argmax of the reference's logit biases and penalties over the raw
    logits of one step() (penalties off) at that position: (agreeing,
    decisive) counts."""
    agree, decisive, agree_decisive = 0, 0, 0
    args = [penalties.get(k, d) for k, d in (("repetition_penalty", 1.0), ("frequency_penalty", 0.0),
                                             ("presence_penalty", 0.0))]
    bias = penalties.get("logit_bias") or {}
    for token, (seq, x) in zip(tokens, raw_steps(session, prompt, tokens)):
        want = penalize(logit_bias(x, list(bias), list(bias.values())), seq, len(prompt), *args)
        top = np.sort(want)[-2:]
        ok = token == int(np.argmax(want))
        agree += ok
        if top[1] - top[0] > 1e-2 * max(abs(top[1]), 1.0):
            decisive += 1
            agree_decisive += ok
    return {"tokens": len(tokens), "agree": agree, "decisive": decisive, "decisive_agree": agree_decisive}


def logprob_check(session: DecodeSession, prompt: list, tokens: list, entries: list, k: int) -> dict:
    """Each of `entries` (the Logprobs of `tokens`, generated greedy after
    `prompt`) against the reference's over the raw logits of one step() at
    that position: the worst absolute error of the token's log-probability
    and of the top ids', how many top-id lists agree (ties in the low
    bits of the logits may order two ids either way, or swap the last one
    for another) and how many of the reference's ids the lists hold."""
    worst, worst_top, same, held = 0.0, 0.0, 0, 0
    for token, entry, (_, x) in zip(tokens, entries, raw_steps(session, prompt, tokens)):
        lse, ids, values = top_logprobs(x, k)
        worst = max(worst, abs(entry.logprob - (x[token] - lse)))
        got = dict(entry.top)
        worst_top = max([worst_top, *(abs(got[i] - v) for i, v in zip(ids.tolist(), values) if i in got)])
        same += [i for i, _ in entry.top] == ids.tolist()
        held += len(set(got) & set(ids.tolist()))
    return {"tokens": len(tokens), "worst_logprob_error": worst, "worst_top_error": worst_top, "top_ids_agree": same,
            "top_ids_held": held, "top_ids": k * len(tokens)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--batches", default="1")
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3, help="timed generations per way (the median is kept)")
    parser.add_argument("--peer", default="compiled", help="'compiled' or '' for none")
    parser.add_argument("--peer-batches", default="1")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--chunks", default="16", help="stream() chunks to time ('' for none)")
    parser.add_argument("--temperature", type=float, default=0.8, help="temperature of the sampled run (0: none)")
    parser.add_argument("--filters", default="", help="filters of the sampled run (JSON, e.g. '{\"top_p\": 0.9}')")
    parser.add_argument("--penalties", default='{"repetition_penalty": 1.3, "frequency_penalty": 0.5, '
                        '"presence_penalty": 0.2}', help="penalties of the penalized run (JSON; '' for none)")
    parser.add_argument("--check-tokens", type=int, default=32, help="tokens of the penalized run checked")
    parser.add_argument("--logprobs", type=int, default=0, help="top ids per token of the logprobs run (0: none)")
    parser.add_argument("--json")
    args = parser.parse_args()

    root = Path(args.root)
    dirs = [root] if (root / "model.json").exists() else sorted(p for p in root.iterdir() if (p / "model.json").exists())
    rows = []
    device_name = torch.cuda.get_device_name()
    for d in dirs:
        info = json.loads((d / "model.json").read_text())
        config = ModelConfig.from_dict(info["config"])
        weights_t = random_model_weights(config, seed=0)
        try:
            session = DecodeSession(d, to_numpy_bf16(weights_t))
        except Exception as err:  # an artifact that does not load: say so, go on with the others
            rows.append({"artifact": d.name, "gpu": device_name, "error": f"{type(err).__name__}: {err}"})
            print(json.dumps(rows[-1]), flush=True)
            continue
        rng = np.random.default_rng(0)
        for batch in [int(b) for b in args.batches.split(",")]:
            if batch > session.max_batch:
                continue
            prompts = rng.integers(0, config.vocab_size, (batch, args.prompt)).tolist()
            row = {"artifact": d.name, "batch": batch, "prompt": args.prompt, "new": args.new, "gpu": device_name}
            session.reset()
            session.generate(prompts, 8)  # warm-up
            per = args.new - 1
            device_s, loop_s, device_tokens, loop_tokens = [], [], [], []
            for _ in range(args.repeats):
                session.reset()
                g = session.generate(prompts, args.new)
                device_s.append(g.decode_s)
                device_tokens.append(g.tokens)
                tokens, seconds = host_loop(session, prompts, args.new)
                loop_s.append(seconds)
                loop_tokens.append(tokens)
            row["device_ms"] = 1e3 * float(np.median(device_s)) / per
            row["host_loop_ms"] = 1e3 * float(np.median(loop_s)) / per
            for k in [int(c) for c in args.chunks.split(",") if c]:
                times = []
                for _ in range(args.repeats):
                    session.reset()
                    stream = session.stream(prompts, args.new, chunk=k)
                    for _ in stream:
                        pass
                    times.append(stream.result.decode_s)
                row[f"stream_{k}_ms"] = 1e3 * float(np.median(times)) / per
            if args.temperature > 0:
                times = []
                for r in range(args.repeats):
                    session.reset()
                    times.append(session.generate(prompts, args.new, temperature=args.temperature, seed=r,
                                                  **json.loads(args.filters or "{}")).decode_s)
                row["sampled_ms"] = 1e3 * float(np.median(times)) / args.new
            if args.penalties:
                penalties = json.loads(args.penalties)
                if "logit_bias" in penalties:  # (JSON keys are strings)
                    penalties["logit_bias"] = {int(k): v for k, v in penalties["logit_bias"].items()}
                times = []
                for r in range(args.repeats):
                    session.reset()
                    pg = session.generate(prompts, args.new, **penalties)
                    times.append(pg.decode_s)
                row["penalized_ms"] = 1e3 * float(np.median(times)) / args.new
                row["penalized_differs"] = pg.tokens != g.tokens
                row["penalty_check"] = penalty_check(session, prompts[0], pg.tokens[0][: args.check_tokens],
                                                     penalties)
            if args.logprobs:
                times = []
                for r in range(args.repeats):
                    session.reset()
                    lg = session.generate(prompts, args.new, logprobs=args.logprobs)
                    times.append(lg.decode_s)
                row["logprobs_ms"] = 1e3 * float(np.median(times)) / args.new
                row["logprobs_same_tokens"] = lg.tokens == g.tokens
                row["logprob_check"] = logprob_check(session, prompts[0], lg.tokens[0][: args.check_tokens],
                                                     lg.logprobs[0][: args.check_tokens], args.logprobs)
            row["same_tokens"] = g.tokens == tokens
            # Where the two first differ (rows' positions), and whether each
            # way repeats itself: relaxed atomic adds (o_per_head) make the
            # low bits of the logits vary from run to run, and random
            # weights leave near ties that such bits flip.
            row["first_difference"] = min((i for a, b in zip(g.tokens, tokens)
                                           for i, (x, y) in enumerate(zip(a, b)) if x != y), default=None)
            row["device_repeatable"] = all(t == device_tokens[0] for t in device_tokens)
            row["host_loop_repeatable"] = all(t == loop_tokens[0] for t in loop_tokens)
            row["finish_reasons"] = sorted(set(g.finish_reasons))
            row["kernel_ms"] = 1e3 * kernel_seconds(session, batch, args.prompt + args.new // 2, args.iters)
            row["host_overhead_ms"] = row["device_ms"] - row["kernel_ms"]
            if args.peer and str(batch) in args.peer_batches.split(","):
                from hf_models import PeerGenerator

                peer = PeerGenerator(config, weights_t, torch.tensor(prompts), args.new,
                                     compiled=args.peer == "compiled")
                t0 = time.perf_counter()
                peer.generate()  # compilation and graph capture
                row["peer_warmup_s"] = time.perf_counter() - t0
                peer_s = [peer.generate()[2] for _ in range(args.repeats)]
                row["peer_ms"] = 1e3 * float(np.median(peer_s)) / per
                del peer
            print(json.dumps(row), flush=True)
            rows.append(row)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1))
        session.close()
        del session, weights_t
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
