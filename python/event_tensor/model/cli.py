"""`event-tensor demo | compile | run | bench | trace`: the model commands
of the console script (see event_tensor/cli.py for the parser)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["add_commands"]


class Progress:
    """A one-line progress bar on stderr (plain lines when not a terminal)."""

    def __init__(self, total: int, label: str, stream=None):
        self.total, self.label, self.n = max(total, 1), label, 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.perf_counter()
        self._draw()

    def _draw(self, note: str = "") -> None:
        frac = self.n / self.total
        if self.tty:
            bar = "#" * int(30 * frac) + "-" * (30 - int(30 * frac))
            self.stream.write(f"\r{self.label} [{bar}] {self.n}/{self.total} {note}")
            self.stream.flush()

    def update(self, note: str = "") -> None:
        self.n += 1
        self._draw(note)

    def done(self, note: str = "") -> None:
        elapsed = time.perf_counter() - self.start
        if self.tty:
            self.stream.write("\r" + " " * 79 + "\r")
        self.stream.write(f"{self.label}: {self.n}/{self.total} in {elapsed:.2f} s {note}\n")
        self.stream.flush()


class _LazyProgress:
    """A progress callback `(done, total)` that opens its bar on the first call."""

    def __init__(self, label: str):
        self.label, self.bar = label, None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = Progress(total, self.label)
        self.bar.update()

    def done(self) -> None:
        if self.bar is not None:
            self.bar.done()


def _int_at_least(least: int, what: str):
    """An argparse type: an int of at least `least` (`what` names it in the
    error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {what}, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be a {what}, got {value}")
        return value
    return parse


_positive_int = _int_at_least(1, "positive integer")
_nonnegative_int = _int_at_least(0, "non-negative integer")


def _float_type(ok, expected: str):
    """An argparse type: a number for which `ok(value)` holds (text that is
    no number fails it), else an error saying `expected`."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value
    return parse


#: argparse types: a finite number above 0; a number in (0, 1].
_positive_float = _float_type(lambda v: 0 < v < float("inf"), "a positive number")
_fraction = _float_type(lambda v: 0 < v <= 1, "a number in (0, 1]")


#: The largest relative logit error against the numpy reference that `demo`
#: and `run --check` pass (bf16 activations on small models differ by up
#: to about 2% from a float32 reference: docs/models.md, "Checks").
CHECK_TOLERANCE = 2e-2


def _err(msg: str) -> int:
    print(f"event-tensor: error: {msg}", file=sys.stderr)
    return 2


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch or no driver: no CUDA
        return False


def _device(choice: str) -> str:
    if choice == "auto":
        return "cuda" if _cuda_available() else "cpu"
    if choice == "cuda" and not _cuda_available():
        raise ValueError("--device cuda: no CUDA device is available (torch with CUDA is needed)")
    return choice


def _config_from(spec: str):
    from .config import PRESETS, ConfigError, ModelConfig, preset

    if spec in PRESETS:
        return preset(spec)
    if not Path(spec).exists():
        raise ConfigError(f"{spec}: neither a config.json, a directory holding one, nor a preset "
                          f"({', '.join(PRESETS)})")
    return ModelConfig.from_hf(spec)


def _weights(config, paths: list[str] | None, seed: int, explicit: bool = False):
    """The weights of --weights, else random ones (`explicit`: asked for by
    --random-weights, else with a note)."""
    from .weights import load_weights, random_weights

    if paths:
        return load_weights(config, paths), "safetensors: " + ", ".join(paths)
    if not explicit:
        print(f"note: no --weights given: random bf16 weights (seed {seed}); the tokens mean nothing",
              file=sys.stderr)
    try:
        return random_weights(config, seed), f"random bf16 weights (seed {seed})"
    except MemoryError:
        raise ValueError(f"random weights for this model take {config.weight_bytes() / 1e9:.1f} GB, more than "
                         "this machine can allocate") from None


def _parse_ids(text: str, flag: str) -> list[int]:
    """Token ids separated by commas or spaces (empty: none)."""
    try:
        return [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise ValueError(f"{flag} must be token ids separated by commas or spaces, got {text!r}") from None


def _parse_prompt(text: str, vocab: int, batch: int) -> list[list[int]]:
    ids = _parse_ids(text, "--prompt")
    if not ids:
        raise ValueError("--prompt is empty")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"--prompt token {bad[0]} is outside the vocabulary [0, {vocab})")
    # Sequence b starts from the prompt shifted by b, so sequences differ.
    return [[(t + b) % vocab for t in ids] for b in range(batch)]


def _print_breakdown(trace, out=None) -> None:
    out = out or sys.stdout
    kinds = trace.breakdown()
    span = trace.makespan_ns
    total = trace.workers * span
    print(f"where the time went (one step, {trace.workers} workers x {span / 1e3:.1f} us = "
          f"{total / 1e6:.2f} worker-ms):", file=out)
    idle = kinds.pop("idle")["work_ns"]
    rows = sorted(kinds.items(), key=lambda kv: -(kv[1]["wait_ns"] + kv[1]["work_ns"]))
    for name, row in rows:
        t = row["wait_ns"] + row["work_ns"]
        print(f"  {name:12s} {row['tiles']:6d} tiles  work {row['work_ns'] / 1e3:10.1f} us  "
              f"wait {row['wait_ns'] / 1e3:10.1f} us  ({100 * t / max(total, 1):5.1f}%)", file=out)
    waits = sum(r["wait_ns"] for r in kinds.values())
    work = sum(r["work_ns"] for r in kinds.values())
    print(f"  total: work {100 * work / max(total, 1):.1f}%, waiting for inputs {100 * waits / max(total, 1):.1f}%, "
          f"idle outside tiles {100 * idle / max(total, 1):.1f}%", file=out)


def _write_trace(trace, prefix: Path, title: str) -> list[Path]:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    js, png = prefix.with_suffix(".trace.json"), prefix.with_suffix(".gantt.png")
    trace.chrome_trace(js)
    written = [js]
    try:
        trace.gantt_png(png, title=title)
        written.append(png)
    except ImportError:
        print("  (matplotlib missing: no Gantt chart)", file=sys.stderr)
    return written


@dataclass
class StepCheck:
    """What `_check_steps` found: the worst relative logit error, the greedy
    tokens that agree out of those compared, and the same where the
    reference's top two logits are more than twice the step's largest logit
    difference apart (a flip there is an error, not rounding)."""

    worst: float = 0.0
    agree: int = 0
    count: int = 0
    decisive_agree: int = 0
    decisive_count: int = 0


def _check_steps(session, ref, prompts, steps: int, progress: Progress | None) -> StepCheck:
    """Teacher-forced decode on both, every step compared."""
    c = StepCheck()
    batch = len(prompts)
    plen = len(prompts[0])
    tokens = np.asarray(prompts)
    nxt = tokens[:, 0]
    for t in range(plen + steps - 1):
        feed = tokens[:, t] if t < plen else nxt
        got = session.step(feed, [t] * batch)
        want = ref.step(feed, [t] * batch)
        logits = session.last_logits()
        c.worst = max(c.worst, float(np.abs(logits - want).max() / max(np.abs(want).max(), 1e-30)))
        same = got == want.argmax(-1)
        c.agree += int(same.sum())
        c.count += batch
        top2 = np.sort(want, axis=-1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 2 * np.abs(logits - want).max(axis=-1)
        c.decisive_agree += int(same[clear].sum())
        c.decisive_count += int(clear.sum())
        nxt = got
        if progress:
            progress.update()
    return c


def cmd_demo(args: argparse.Namespace) -> int:
    from .compile import compile_model, default_workers
    from .config import demo_config
    from .reference import ReferenceModel
    from .session import DecodeSession
    from .weights import random_weights

    config = demo_config()
    try:
        device = _device(args.device)
        prompts = _parse_prompt(args.prompt, config.vocab_size, args.batch)
    except ValueError as err:
        return _err(str(err))
    steps = args.steps
    if len(prompts[0]) + steps > args.context:
        return _err(f"prompt ({len(prompts[0])}) + steps ({steps}) exceed the context {args.context}")
    out = Path(args.out)
    workers = (args.workers or default_workers("cpu")) if device == "cpu" else default_workers(device)
    print(f"EventTensor demo: a Llama-shaped model ({config.num_layers} layers, hidden {config.hidden_size}, "
          f"{config.num_heads}/{config.num_kv_heads} heads of {config.head_dim}, vocab {config.vocab_size}), "
          f"random bf16 weights, one decode step = one persistent kernel on {device}"
          + (f" ({workers} host worker threads)" if device == "cpu" else ""))
    weights = random_weights(config, seed=args.seed)
    start = time.perf_counter()
    try:
        path = compile_model(config, target=device, max_batch=args.batch, max_context=args.context,
                             workers=workers, profile=True,
                             **({"threads_per_worker": 512} if device == "cuda" else {}))
    except ValueError as err:
        return _err(str(err))
    compile_s = time.perf_counter() - start
    print(f"compiled in {compile_s:.2f} s -> {path}")
    session = DecodeSession(path, weights)
    ref = ReferenceModel(config, weights, max_batch=args.batch, max_context=args.context)
    progress = Progress(len(prompts[0]) + steps - 1, "checking every step against the numpy reference")
    c = _check_steps(session, ref, prompts, steps, progress)
    progress.done()
    ok = c.worst < CHECK_TOLERANCE and c.agree == c.count
    print(f"logits vs the numpy reference: max relative error {c.worst:.1e}; greedy tokens agree "
          f"{c.agree}/{c.count} -> {'OK' if ok else 'MISMATCH'}")
    # Timed greedy generation from a fresh cache.
    session.reset()
    tokens, times = session.generate_stepwise(prompts, steps)
    for b, seq in enumerate(tokens):
        print(f"  sequence {b}: prompt {prompts[b]} -> {seq.tolist()}")
    if times:
        per = float(np.median(times))
        print(f"decode: {per * 1e3:.2f} ms per step (median of {len(times)}), "
              f"{args.batch / per:.0f} tokens/s at batch {args.batch}")
    trace = session.last_trace
    if trace is not None and trace.records:
        _print_breakdown(trace)
        files = _write_trace(trace, out / "demo", "EventTensor demo: one decode step")
        print("trace: " + ", ".join(str(f) for f in files))
    session.close()
    return 0 if ok else 1


def cmd_compile(args: argparse.Namespace) -> int:
    from ..compiler import EventTensorCompileError
    from .compile import compile_model
    from .config import ConfigError

    try:
        # Compiling for CUDA needs no GPU here (the artifact runs elsewhere).
        device = args.device if args.device != "auto" else _device("auto")
        config = _config_from(args.config)
    except (ConfigError, ValueError) as err:
        return _err(str(err))
    start = time.perf_counter()
    try:
        from .compile import default_prefill_rows, default_shape_options, default_workers
        from .layout import default_context

        workers = args.workers or default_workers(device)
        max_context = args.max_context if args.max_context is not None else default_context(config)
        shape = default_shape_options(config, device, args.max_batch, max_context, args.tuning_table)
        if args.specialize is not None:
            shape["specialize"] = args.specialize
        if args.linear_tile is not None:
            shape["linear_tile"] = args.linear_tile
        if args.batch_variants and args.linear_tile is None:
            shape["linear_tile"] = "rows"

        prefill_rows = args.prefill_rows
        if prefill_rows is None:
            prefill_rows = default_prefill_rows(config, device, max_context)
        if prefill_rows < 0:
            raise ValueError(f"--prefill-rows must be >= 0, got {prefill_rows}")
        fmt = args.format
        if fmt == "auto":
            from ..testing import ptxas_path

            fmt = "bin" if ptxas_path() else "isa"
        cuda = {"format": fmt} if device == "cuda" else {}
        if device == "cuda" and args.threads is not None:
            cuda["threads_per_worker"] = args.threads
        out = compile_model(config, target=device, max_batch=args.max_batch, max_context=max_context,
                            workers=workers, out_dir=args.output, profile=args.profile,
                            layered=False if args.per_layer else None,
                            tuning_table=args.tuning_table, batch_variants=args.batch_variants,
                            linear_tile=shape["linear_tile"], specialize=shape["specialize"],
                            o_per_head=False if args.deterministic else None,
                            expert_combine=True if args.deterministic else None,
                            split_k=False if args.deterministic else None, prefill_rows=prefill_rows,
                            tp=args.tp, **cuda)
    except (ValueError, EventTensorCompileError) as err:  # TableError is a ValueError
        return _err(str(err))
    print(f"compiled {config.architecture or config.family} ({config.num_layers} layers) for {device}"
          + (f" x {args.tp}" if args.tp > 1 else "") + f", max batch {args.max_batch}, max context "
          f"{max_context}, {workers} workers" + (f", a prefill kernel of {prefill_rows} rows" if prefill_rows
                                                      else "")
          + f" in {time.perf_counter() - start:.2f} s -> {out}")
    return 0


def _open(args: argparse.Namespace, required_weights: bool = False):
    from .session import DecodeSession, ModelArtifactError
    from .weights import WeightError

    try:
        info = json.loads((Path(args.artifact) / "model.json").read_text())
    except OSError:
        raise ModelArtifactError(f"{args.artifact}: no model.json (compile one with `event-tensor compile`)")
    from .config import ModelConfig

    config = ModelConfig.from_dict(info["config"])
    if required_weights and not args.weights and not args.random_weights:
        raise ValueError("give the model's weights (--weights FILES or a directory), or --random-weights to run "
                         "with random bf16 weights")
    try:
        weights, what = _weights(config, args.weights, args.weight_seed, explicit=args.random_weights)
    except WeightError as err:
        raise ValueError(str(err)) from None
    print(f"weights: {what}")
    try:
        return DecodeSession(args.artifact, weights), config, weights
    except MemoryError:
        raise ValueError(f"{args.artifact}: the session's buffers do not fit in this machine's memory") from None


def cmd_run(args: argparse.Namespace) -> int:
    from .reference import ReferenceModel
    from .session import ModelArtifactError, NonFiniteLogitsError

    ok = True
    try:
        session, config, weights = _open(args, required_weights=True)
        prompts = _parse_prompt(args.prompt, config.vocab_size, args.batch)
        if args.check:
            # The numpy reference rounds where the kernel does: every greedy
            # token agrees. transformers computes in float32: those where its
            # top two logits are apart do.
            exact = args.check == "numpy"
            if exact:
                ref = ReferenceModel(config, weights, max_batch=session.max_batch, max_context=session.max_context)
            else:
                from .hf import TransformersReference

                ref = TransformersReference(config, weights, max_batch=session.max_batch)
            progress = Progress(len(prompts[0]) + args.max_new_tokens - 1, "checking against "
                                + ("the numpy reference" if exact else "transformers (float32, CPU)"))
            c = _check_steps(session, ref, prompts, args.max_new_tokens, progress)
            progress.done()
            ok = c.worst < CHECK_TOLERANCE and (c.agree == c.count if exact else c.decisive_agree == c.decisive_count)
            print(("" if exact else "against transformers: ")
                  + f"max relative logit error {c.worst:.1e}, greedy tokens agree {c.agree}/{c.count} "
                  + ("" if exact else f"({c.decisive_agree}/{c.decisive_count} where the top two logits are apart) ")
                  + f"-> {'OK' if ok else 'MISMATCH'}")
            session.reset()
        stop = _parse_ids(args.stop, "--stop")
        result = session.generate(prompts, args.max_new_tokens, stop=stop, temperature=args.temperature,
                                  seed=args.seed, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                                  **logit_kwargs(args))
    except (ModelArtifactError, NonFiniteLogitsError, ValueError, ImportError) as err:
        return _err(str(err))
    for b, (seq, reason) in enumerate(zip(result.tokens, result.finish_reasons)):
        print(f"sequence {b}: {seq} ({reason})")
        if result.logprobs is not None:
            print_logprobs(seq, result.logprobs[b])
    new = sum(len(t) for t in result.tokens)
    if new > len(prompts):
        per = result.decode_s / max(max(len(t) for t in result.tokens) - 1, 1)
        print(f"prefill {result.prefill_s * 1e3:.1f} ms; {per * 1e3:.3f} ms per decode step (wall clock, "
              f"{result.launches} launch{'es' if result.launches != 1 else ''}), "
              f"{(new - len(prompts)) / max(result.decode_s, 1e-9):.0f} tokens/s")
    session.close()
    return 0 if ok else 1


def cmd_bench(args: argparse.Namespace) -> int:
    from .session import ModelArtifactError

    try:
        session, config, _ = _open(args)
        batch = args.batch
        if batch > session.max_batch:
            raise ValueError(f"--batch {batch} exceeds the compiled max batch {session.max_batch}")
        tokens = np.arange(batch) % config.vocab_size
        progress = Progress(args.warmup + args.iters, f"decode steps at batch {batch}, position {args.position}")
        times = []
        for i in range(args.warmup + args.iters):
            session.step(tokens, [args.position] * batch)
            if i >= args.warmup:
                times.append(session.last_step_s)
            progress.update()
        progress.done()
    except (ModelArtifactError, ValueError) as err:
        return _err(str(err))
    per = float(np.median(times))
    print(f"{per * 1e3:.3f} ms per step (median of {len(times)}; min {min(times) * 1e3:.3f}), "
          f"{batch / per:.0f} tokens/s; weights {config.weight_bytes() / 1e6:.1f} MB -> "
          f"{config.weight_bytes() / per / 1e9:.1f} GB/s")
    session.close()
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from .session import ModelArtifactError

    try:
        session, config, _ = _open(args)
        if not session.artifact.metadata.get("profile"):
            raise ValueError(f"{args.artifact} was compiled without profiling: recompile with "
                             "`event-tensor compile --profile`")
        batch = args.batch
        tokens = np.arange(batch) % config.vocab_size
        for _ in range(2):
            session.step(tokens, [args.position] * batch)
    except (ModelArtifactError, ValueError) as err:
        return _err(str(err))
    trace = session.last_trace
    _print_breakdown(trace)
    files = _write_trace(trace, Path(args.output), f"{config.family}: one decode step")
    print("wrote " + ", ".join(str(f) for f in files))
    session.close()
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from .. import tuner
    from .compile import default_workers
    from ..tuning import TableError

    try:
        target = _device("auto") if args.device == "auto" else args.device
        work = Path(args.dir)
        if args.shapes:
            try:
                shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
                if any(len(s) != 2 or min(s) < 1 for s in shapes):
                    raise ValueError
            except ValueError:
                raise ValueError(f"--shapes must be NxK[,NxK...], got {args.shapes!r}") from None
        else:
            shapes = tuner.model_shapes(args.models.split(","))
        def ints_or_auto(flag: str, text: str):
            if text == "auto":
                return None
            try:
                values = [int(v) for v in text.split(",")]
            except ValueError:
                values = []
            if not values or min(values) < 1:
                raise ValueError(f"{flag} must be positive ints or 'auto', got {text!r}")
            return values

        ks = ints_or_auto("--ks", args.ks)
        ms = ints_or_auto("--ms", args.ms)
        try:
            per_worker = [float(v) for v in args.tiles_per_worker.split(",")]
        except ValueError:
            per_worker = []
        if not per_worker or not min(per_worker) > 0:
            raise ValueError(f"--tiles-per-worker must be positive numbers, got {args.tiles_per_worker!r}")
        waves = ints_or_auto("--waves", args.waves)
        if waves is not None and len(waves) != 1:
            raise ValueError(f"--waves must be one positive int or 'auto', got {args.waves!r}")
        if args.step in ("all", "prepare"):
            progress = _LazyProgress("compiling the sample kernels")
            tuner.prepare(work, target=target, workers=args.workers or default_workers(target),
                          threads=args.threads, shapes=shapes, m_max=args.m_max,
                          rows=[int(r) for r in args.rows.split(",")],
                          ks=ks, ms=ms, max_waves=None if waves is None else waves[0],
                          sampling=args.sampling, tiles_per_worker=per_worker,
                          fmt=args.format if target == "cuda" else "isa", gemm=args.gemm, progress=progress)
            progress.done()
        if args.step in ("all", "measure"):
            progress = _LazyProgress("measuring")
            tuner.measure(work, progress=progress)
            progress.done()
        if args.step in ("all", "fit"):
            table = tuner.fit(work, args.output)
            n = sum(len(macro) for macro, _ in table.linear.values())
            g = sum(len(choice) for _, choice, _ in table.gemm.values())
            shapes = len(set(table.linear) | set(table.gemm))
            print(f"tuning table for {table.gpu}: {shapes} shapes x M 1..{args.m_max} ({n} et.linear entries"
                  + (f", {g} et.matmul entries" if g else "") + f"), validated -> {args.output}")
    except (ValueError, TableError, OSError) as err:
        return _err(str(err))
    return 0


def sampling_args(p) -> None:
    """The sampling flags of `run` and `generate`."""
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0: greedy)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampling (default 0)")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (default 0: off)")
    p.add_argument("--top-p", type=float, default=1.0,
                   help="sample among the fewest most likely tokens that hold this share of the probability "
                   "(default 1: off)")
    p.add_argument("--min-p", type=float, default=0.0,
                   help="sample among the tokens at least this share as likely as the most likely one "
                   "(default 0: off)")
    p.add_argument("--repetition-penalty", type=float, default=1.0,
                   help="divide the positive logits of tokens already in the sequence by this, multiply the "
                   "negative ones (default 1: off)")
    p.add_argument("--frequency-penalty", type=float, default=0.0,
                   help="subtract this times its count from the logit of each generated token (default 0: off)")
    p.add_argument("--presence-penalty", type=float, default=0.0,
                   help="subtract this from the logit of each token generated before (default 0: off)")
    p.add_argument("--logit-bias", type=_logit_bias, action="append", default=[], metavar="ID=BIAS",
                   help="add BIAS to the logit of token ID (repeatable, an ID given twice adds up; -100 all but "
                   "bans it, 100 all but forces it)")
    p.add_argument("--logprobs", type=int, default=None, metavar="N",
                   help="print each new token's log-probability and the N (0-20) most likely tokens' after the "
                   "output")


def _logit_bias(text: str) -> tuple[int, float]:
    """One `--logit-bias ID=BIAS`."""
    token, sep, bias = text.partition("=")
    try:
        if not sep:
            raise ValueError
        return int(token), float(bias)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ID=BIAS (a token id and a number), got {text!r}") from None


def logit_kwargs(args) -> dict:
    """The penalties, logit biases and log-probabilities of the sampling
    flags, as generate() and SamplingParams take them."""
    bias = {}
    for token, value in args.logit_bias:
        bias[token] = bias.get(token, 0.0) + value
    return dict(repetition_penalty=args.repetition_penalty, frequency_penalty=args.frequency_penalty,
                presence_penalty=args.presence_penalty, logit_bias=bias or None, logprobs=args.logprobs)


def print_logprobs(tokens, entries, show=str, out=None) -> None:
    """A line per token: `show(token)`, its log-probability, the most likely
    tokens' (`show(id)=logprob`)."""
    for token, e in zip(tokens, entries):
        top = " ".join(f"{show(i)}={lp:.4f}" for i, lp in e.top)
        print(f"  {show(token)}\t{e.logprob:.4f}" + (f"\t{top}" if top else ""), file=out)


def add_commands(sub) -> None:
    """Adds the model commands to the CLI's subparsers."""
    from .config import PRESETS

    device_help = "where to run: cpu (host worker threads), cuda, or auto (cuda when available)"

    p = sub.add_parser("demo", help="compile a built-in Llama-shaped model, run and check it (the default)",
                       description="Compile a small built-in Llama-shaped model (random weights) into one "
                       "megakernel, run a prompt and a few decode steps, check every step's logits against "
                       "the numpy reference, print tokens/s and where the time went, and write the step's "
                       "trace (Chrome JSON and Gantt PNG).")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help=device_help)
    p.add_argument("--steps", type=_positive_int, default=8, help="decode steps after the prompt (default 8)")
    p.add_argument("--batch", type=_positive_int, default=2, help="sequences decoded together (default 2)")
    p.add_argument("--context", type=_positive_int, default=64, help="compiled max context (default 64)")
    p.add_argument("--workers", type=_positive_int, help="host worker threads on cpu (default: the available cores, "
                   "at least 4)")
    p.add_argument("--prompt", default="1, 5, 9, 2", help="prompt token ids (default '1, 5, 9, 2')")
    p.add_argument("--seed", type=_nonnegative_int, default=0, help="seed of the random weights")
    p.add_argument("--out", default="event-tensor-demo", help="directory for the trace files")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("compile", help="compile a model's decode step into one megakernel artifact",
                       description="Compile the decode step (every layer, final norm, LM head, greedy argmax) "
                       "of a Llama-3 or Qwen3 model into one persistent kernel. CONFIG is a Hugging Face "
                       f"config.json (or its directory), or a preset: {', '.join(PRESETS)} "
                       "(shapes only; weights come at run time). Batch size and "
                       "context length are runtime values up to the compiled maxima.")
    p.add_argument("config", help="config.json, a directory holding one, or a preset name")
    p.add_argument("-o", "--output", required=True, help="artifact directory to write")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="target: cpu, cuda (no GPU needed to compile for it), or auto (cuda when one is present)")
    p.add_argument("--max-batch", type=int, default=1,
                   help="largest batch (1-64, default 1; above 16 with --linear-tile mma or auto)")
    p.add_argument("--max-context", type=int, default=None,
                   help="largest context (default 1024, or the model's max_position_embeddings if smaller)")
    p.add_argument("--workers", type=_positive_int, help="persistent workers (default 132 on cuda; on cpu the "
                   "available cores, at least 4)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads per worker on cuda (default: 512, or 384 for max batch 1 of models with a hidden "
                   "size up to 1024; model_threads)")
    p.add_argument("--format", choices=["auto", "isa", "bin"], default="auto",
                   help="cuda: a cubin for sm_90a (bin: ptxas runs here, loads in well under a second), PTX (isa: "
                   "the driver compiles it at first load, tens of seconds for a whole model, for any GPU), or "
                   "auto (the default): a cubin where ptxas is found, else PTX")
    p.add_argument("--prefill-rows", type=int, default=None,
                   help="also a prefill kernel of tensor-core tiles that feeds prompts in launches of this many "
                   "tokens (the fast time to first token; default: 512, at most the context, on cuda for models "
                   "without experts; else 0: prompts go through the decode kernel)")
    p.add_argument("--tp", type=_positive_int, default=1,
                   help="split the model over this many GPUs (tensor parallelism: heads, MLP columns and vocabulary; "
                   "on cpu, groups of worker threads); default 1")
    p.add_argument("--profile", action="store_true", help="record per-tile times (for `trace`)")
    p.add_argument("--tuning-table", help="a table from `event-tensor tune`, or the name of a GPU with a shipped "
                   "table (such as 'NVIDIA H200'): rows per tile of each linear layer")
    p.add_argument("--batch-variants", action="store_true",
                   help="with --tuning-table: one kernel per range of batch sizes with the same table choices, "
                   "picked per launch")
    p.add_argument("--linear-tile", choices=["rows", "mma", "auto"], default=None,
                   help="linear layers: et.linear row tiles, et.matmul tensor-core tiles, or auto (row tiles for "
                   "small batches, tensor cores from batch 4, or 8 for hidden sizes below 2048, as kernel variants). "
                   "Default: auto on cuda where the max batch reaches tensor cores (not with --tuning-table or "
                   "--batch-variants), else rows")
    p.add_argument("--specialize", action=argparse.BooleanOptionalAction, default=None,
                   help="one kernel per batch bucket (1, 2, 4, 8, max) and context bucket (256, 512, ..., doubling, max; "
                   "a batch range keeps the context buckets that change its attention tiles), "
                   "each compiled for its own shape, sharing weights and KV caches; picked per launch. Default: on "
                   "for cuda (models without experts, without --tuning-table), off for cpu")
    p.add_argument("--per-layer", action="store_true",
                   help="one task per kind and layer instead of one per kind over (layer, tile) (the default): "
                   "a kernel about L times larger that takes tens of seconds to compile and load")
    p.add_argument("--deterministic", action="store_true",
                   help="cuda: logits that repeat bit for bit from run to run (each output row of the attention "
                   "projection summed by one tile, with a merge task before it, instead of the query heads' "
                   "shares added atomically; 1-6%% slower; with experts, a combine task adds their outputs in "
                   "the router's order; tensor-core tiles of o and down take whole K instead of parts added "
                   "atomically). Kernels for cpu always repeat")
    p.set_defaults(func=cmd_compile)

    def artifact_args(p):
        p.add_argument("artifact", help="artifact directory from `event-tensor compile`")
        p.add_argument("--weights", nargs="*", help=".safetensors files or directories")
        p.add_argument("--random-weights", action="store_true",
                       help="random bf16 weights (run needs this or --weights; bench and trace take random "
                       "weights without --weights)")
        p.add_argument("--weight-seed", type=_nonnegative_int, default=0, help="seed of the random weights")
        p.add_argument("--batch", type=_positive_int, default=1, help="sequences (default 1)")

    p = sub.add_parser("run", help="generation with a compiled model",
                       description="Run a prompt and generate with a compiled model artifact: greedy, or "
                                   "sampled with --temperature (and --top-k, --top-p, --min-p); every decode step "
                                   "in one launch on one device.")
    artifact_args(p)
    p.add_argument("--prompt", default="1, 5, 9, 2", help="prompt token ids")
    p.add_argument("--max-new-tokens", "--steps", dest="max_new_tokens", type=_positive_int, default=16,
                   help="new tokens per sequence at most (default 16)")
    p.add_argument("--stop", default="", help="token ids that end a sequence (comma-separated; kept in the output)")
    sampling_args(p)
    p.add_argument("--check", nargs="?", const="numpy", choices=["numpy", "transformers"],
                   help="first compare every step, teacher-forced, with the numpy reference (the default) or with "
                   "Hugging Face transformers in float32 on the CPU (needs torch and transformers): exit 1 on a "
                   "mismatch")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("bench", help="time decode steps of a compiled model",
                       description="Time decode steps of a compiled model at one batch size and position.")
    artifact_args(p)
    p.add_argument("--position", type=int, default=0, help="position of the decoded token (context - 1)")
    p.add_argument("--warmup", type=_nonnegative_int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--iters", type=_positive_int, default=20, help="timed steps (default 20)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("tune", help="measure tile configurations and write a tuning table",
                       description="Regenerate the wave-aware tuning table of et.linear on this machine: compile "
                       "sample kernels (prepare, needs MLIR; by default every candidate configuration, fixed and "
                       "wave-sized rows per tile, at the shapes' own N and K), time them at a few M (measure, "
                       "runtime only), build the table from the latencies interpolated in M, or from wave models "
                       "fitted at the wave boundaries with --sampling waves, and write it validated (fit); "
                       "with --gemm, et.matmul candidates too, for M up to --m-max. "
                       "--step runs one step, so prepare can run here and measure on a GPU machine without MLIR.")
    p.add_argument("-o", "--output", default="tuning-table.json", help="table to write (default tuning-table.json)")
    p.add_argument("--dir", default="tune-work", help="working directory for kernels and samples")
    p.add_argument("--step", choices=["all", "prepare", "measure", "fit"], default="all")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="target of the kernels")
    p.add_argument("--models", default="llama-3.2-1b,qwen3-0.6b", help="presets whose linear shapes go in the table")
    p.add_argument("--shapes", help="explicit shapes NxK[,NxK...] instead of --models")
    p.add_argument("--m-max", type=int, default=16,
                   help="largest M in the table (default 16; above 16, et.linear's limit, it needs --gemm)")
    p.add_argument("--gemm", action="store_true",
                   help="also measure et.matmul (tensor-core) candidates at the shapes, at the ends of their "
                   "blocks of BM rows, so that the table chooses between both kinds of tile up to --m-max")
    p.add_argument("--sampling", choices=["shapes", "waves"], default="shapes",
                   help="where to measure: every candidate at the shapes' own N and K, interpolated in M "
                   "(default), or synthetic shapes at the wave boundaries, for fitted wave models")
    p.add_argument("--rows", default="8,16,32,64", help="candidate rows per tile")
    p.add_argument("--tiles-per-worker", default="0.5,1,2,4",
                   help="with --sampling shapes, also the rows that give these tiles per worker")
    p.add_argument("--ks", default="1024,4096",
                   help="with --sampling waves: K sizes of the sample kernels, or 'auto': the shapes' own "
                   "(up to three)")
    p.add_argument("--ms", default="auto",
                   help="token counts measured (default: powers of two up to --m-max and --m-max itself at the "
                   "shapes, 1,4,16 at the wave boundaries)")
    p.add_argument("--waves", default="3",
                   help="with --sampling waves: wave regimes sampled, or 'auto': as many as the shapes need at "
                   "each row count")
    p.add_argument("--format", choices=["isa", "bin"], default="isa",
                   help="cuda sample kernels as PTX or cubins (no driver JIT when measuring)")
    p.add_argument("--workers", type=_positive_int, help="persistent workers (default 132 on cuda; on cpu the "
                   "available cores, at least 4)")
    p.add_argument("--threads", type=int, default=512, help="threads per worker on cuda")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("trace", help="profile one decode step (artifact compiled with --profile)",
                       description="Run a decode step of a profiled artifact and write its trace: a Chrome "
                       "trace JSON (open in Perfetto) and a Gantt PNG, plus the time per task kind.")
    artifact_args(p)
    p.add_argument("--position", type=int, default=0, help="position of the decoded token")
    p.add_argument("-o", "--output", default="trace", help="output prefix (default 'trace')")
    p.set_defaults(func=cmd_trace)
