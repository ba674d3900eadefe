"""Wave-aware choice of tile configurations (no MLIR; numpy only).

A tile configuration of `et.linear` has a *macro* part (rows per tile and
K split, which set how many tiles there are) and a *micro* part (loads in
flight per lane). Its latency on a persistent kernel with `capacity` tiles
in flight (workers x tiles per worker) is modelled from two numbers:

- `tiles`, the number of tiles, which with the capacity gives the waves,
  `waves = ceil(tiles / capacity)`, and the tiles in the last wave,
  `u = tiles - (waves - 1) * capacity`;
- `trips`, the inner-loop trips of one tile.

Within a wave regime the latency is bilinear in (u, trips). Full waves
before the last one add a cost linear in trips:

    latency = (waves - 1) * (a + b * trips) + c + d * trips + e * u + f * u * trips

The six coefficients are fitted by least squares to a sparse set of samples
measured at wave boundaries (`WaveModel.fit`). A `TuningTable`, precomputed
per GPU from such models, answers "which configuration for this shape and
M" in O(1): a dict lookup for the shape, then a list index for M. On a GPU
without a table, `choose_linear` falls back to a heuristic and says so.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

__all__ = ["LinearConfig", "TableError", "TuningTable", "WaveModel", "choose_linear", "heuristic_linear",
           "linear_problem", "token_passes", "build_table", "TABLE_FORMAT", "linear_candidates",
           "table_from_samples",
           "GemmConfig", "GemmModels", "gemm_problem", "heuristic_gemm", "choose_gemm", "shipped_gemm_models",
           "shipped_linear_table", "shipped_gpus", "load_linear_table", "choose_tile", "gemm_candidates",
           "gemm_sample_ms", "gemm_curve", "gemm_m_max", "LINEAR_M_MAX"]

TABLE_FORMAT = 1
LINEAR_M_MAX = 16  # et.linear serves at most this many tokens
WARP_ELEMENTS = 256  # bf16 elements one warp covers per 16-byte load per lane


class TableError(ValueError):
    """A tuning table that cannot be used (names the file and the field)."""


def _load_for_gpu(cls, path, gpu, what: str, it: str):
    """`cls.from_json` of the JSON file at `path`, with clear errors for an
    unreadable file, bad JSON, or (with `gpu`) another GPU's data."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise TableError(f"cannot read {what} {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise TableError(f"{path}: not valid JSON ({err})") from None
    loaded = cls.from_json(data, str(path))
    if gpu is not None and loaded.gpu != gpu:
        raise TableError(f"{path}: {it} for {loaded.gpu!r}, this GPU is {gpu!r}")
    return loaded


@dataclass(frozen=True)
class LinearConfig:
    rows: int  # rows of the output per tile (macro)
    split_k: int  # parts the reduction is cut into (macro)
    unroll: int  # 16-byte loads per lane in flight (micro)

    def validate(self, where: str = "config") -> None:
        for name in ("rows", "split_k", "unroll"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise TableError(f"{where}: {name} must be a positive int, got {v!r}")


def token_passes(m: int, token_group: int | None) -> int:
    """Passes over a tile's weights for M tokens: one per token without
    token groups (the per-token loops of the CPU lowering), else one for
    M <= 2 (the GPU's exact one- and two-accumulator paths) and one per
    group of `token_group` tokens above."""
    if token_group is None:
        return m
    return 1 if m <= 2 else math.ceil(m / token_group)


def linear_problem(m: int, n: int, k: int, config: LinearConfig, warps: int,
                   token_group: int | None = None) -> tuple[int, int]:
    """(tiles, inner-loop trips per tile) of an M x N x K linear layer;
    `token_group` as in token_passes."""
    tiles = math.ceil(n / config.rows) * config.split_k
    per_row = math.ceil(k / (config.split_k * WARP_ELEMENTS * config.unroll))
    trips = math.ceil(config.rows / warps) * per_row * token_passes(m, token_group)
    return tiles, trips


def _features(tiles: np.ndarray, trips: np.ndarray, capacity: int) -> np.ndarray:
    tiles = np.asarray(tiles, np.float64)
    trips = np.asarray(trips, np.float64)
    waves = np.ceil(tiles / capacity)
    u = tiles - (waves - 1) * capacity
    full = waves - 1
    return np.stack([full, full * trips, np.ones_like(tiles), trips, u, u * trips], axis=-1)


@dataclass
class WaveModel:
    """Latency of one configuration family as a function of (tiles, trips)."""

    capacity: int
    coefficients: np.ndarray | None = None

    def fit(self, samples: Iterable[tuple[int, int, float]]) -> "WaveModel":
        """Least-squares fit to (tiles, trips, latency) samples."""
        data = np.asarray(list(samples), np.float64)
        if data.ndim != 2 or data.shape[1] != 3 or len(data) < 6:
            raise ValueError(f"need at least 6 (tiles, trips, latency) samples, got {len(data)}")
        if (data[:, :2] < 1).any():
            raise ValueError("tiles and trips must be >= 1")
        x = _features(data[:, 0], data[:, 1], self.capacity)
        self.coefficients, *_ = np.linalg.lstsq(x, data[:, 2], rcond=None)
        return self

    def predict(self, tiles, trips):
        if self.coefficients is None:
            raise ValueError("the model is not fitted")
        return _features(tiles, trips, self.capacity) @ self.coefficients

    @staticmethod
    def boundary_samples(capacity: int, max_waves: int, trips: Sequence[int]) -> list[tuple[int, int]]:
        """Where to measure: at the start, middle and end of each wave
        regime, for each trip count (a sparse grid)."""
        points = set()
        for w in range(1, max_waves + 1):
            base = (w - 1) * capacity
            for u in (1, max(1, capacity // 2), capacity):
                for t in trips:
                    points.add((base + u, int(t)))
        return sorted(points)


@dataclass
class TuningTable:
    """Best configuration per (N, K) shape and M, for one GPU."""

    gpu: str
    workers: int
    threads: int
    linear: dict[tuple[int, int], tuple[list[tuple[int, int]], list[int]]]  # shape -> (macro per M, micro per M)
    path: str = "<memory>"
    # Optional: the chosen linear configuration's predicted seconds per M
    # (what the choice between et.linear and et.matmul compares).
    linear_seconds: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    # Optional: shape -> (candidate GEMM configurations, index of the chosen
    # one per M from 1, its predicted seconds per M).
    gemm: dict[tuple[int, int], tuple[list["GemmConfig"], list[int], list[float]]] = field(default_factory=dict)
    # The configurations per shape and M, made once: constructing a frozen
    # LinearConfig per lookup was half of the decision time.
    _configs: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _gemm: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _tiles: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _source: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._configs = {shape: [LinearConfig(rows, split, unroll) for (rows, split), unroll in zip(macro, micro)]
                         for shape, (macro, micro) in self.linear.items()}
        self._gemm = {shape: [configs[i] for i in choice] for shape, (configs, choice, _) in self.gemm.items()}
        # Per shape and M: ("linear", config) or ("gemm", config), whichever
        # is predicted faster (et.linear only where it serves M and has
        # seconds to compare; without them, et.linear wherever it serves M).
        self._source = f"table {self.gpu}"
        self._tiles = {}
        for shape in set(self.linear) | set(self.gemm):
            lin, lin_s = self._configs.get(shape, []), self.linear_seconds.get(shape)
            gem, gem_s = self._gemm.get(shape, []), (self.gemm[shape][2] if shape in self.gemm else [])
            tiles = []
            for i in range(max(len(lin), len(gem))):
                use_linear = i < len(lin) and (i >= len(gem) or lin_s is None or lin_s[i] <= gem_s[i])
                tiles.append(("linear", lin[i]) if use_linear else ("gemm", gem[i]))
            self._tiles[shape] = tiles

    def _at(self, entries: dict, n: int, k: int, m: int, what: str = ""):
        items = entries.get((n, k))
        if items is None:
            raise KeyError(f"{self.path}: no {what}entry for shape {n}x{k}")
        if not 1 <= m <= len(items):
            raise KeyError(f"{self.path}: M = {m} is outside the table's {what}range [1, {len(items)}] for {n}x{k}")
        return items[m - 1]

    def lookup(self, n: int, k: int, m: int) -> LinearConfig:
        """O(1): the shape's entry, then index M - 1."""
        return self._at(self._configs, n, k, m)

    def lookup_gemm(self, n: int, k: int, m: int) -> "GemmConfig":
        """O(1): the fastest et.matmul configuration of the shape at M."""
        return self._at(self._gemm, n, k, m, "GEMM ")

    def lookup_tile(self, n: int, k: int, m: int) -> tuple[str, "LinearConfig | GemmConfig"]:
        """O(1): ("linear", LinearConfig) or ("gemm", GemmConfig), the tile
        predicted fastest for the shape at M."""
        return self._at(self._tiles, n, k, m)

    def to_json(self) -> dict:
        out = {"format": TABLE_FORMAT, "gpu": self.gpu, "workers": self.workers, "threads": self.threads,
               "linear": {f"{n}x{k}": {"macro": [list(x) for x in macro], "micro": list(micro)}
                          for (n, k), (macro, micro) in sorted(self.linear.items())}}
        for (n, k), seconds in self.linear_seconds.items():
            out["linear"][f"{n}x{k}"]["seconds"] = [float(v) for v in seconds]
        if self.gemm:
            out["gemm"] = {f"{n}x{k}": {"configs": [c.key() for c in configs], "choice": list(choice),
                                        "seconds": [float(v) for v in seconds]}
                           for (n, k), (configs, choice, seconds) in sorted(self.gemm.items())}
        return out

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))

    @classmethod
    def load(cls, path: str | Path, *, gpu: str | None = None) -> "TuningTable":
        """Reads and validates a table; with `gpu`, it must be that GPU's."""
        return _load_for_gpu(cls, path, gpu, "tuning table", "the table is")

    @classmethod
    def from_json(cls, data, where: str = "<memory>") -> "TuningTable":
        if not isinstance(data, dict):
            raise TableError(f"{where}: a tuning table is a JSON object")
        if data.get("format") != TABLE_FORMAT:
            raise TableError(f"{where}: table format {data.get('format')!r} is not {TABLE_FORMAT}")
        gpu = data.get("gpu")
        if not isinstance(gpu, str) or not gpu:
            raise TableError(f"{where}: 'gpu' must name the GPU")
        for key in ("workers", "threads"):
            v = data.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise TableError(f"{where}: '{key}' must be a positive int, got {v!r}")
        linear, linear_seconds = {}, {}
        for shape, entry in (data.get("linear") or {}).items():
            try:
                n, k = (int(x) for x in shape.split("x"))
            except ValueError:
                raise TableError(f"{where}: linear shape {shape!r} is not NxK") from None
            if not isinstance(entry, dict) or not isinstance(entry.get("macro"), list) or \
                    not isinstance(entry.get("micro"), list):
                raise TableError(f"{where}: linear {shape} needs 'macro' and 'micro' lists")
            macro, micro = entry["macro"], entry["micro"]
            if len(macro) != len(micro) or not macro:
                raise TableError(f"{where}: linear {shape}: 'macro' has {len(macro)} entries, 'micro' "
                                 f"{len(micro)}; one per M from 1 is needed in both")
            pairs = []
            for m, (pair, unroll) in enumerate(zip(macro, micro), start=1):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise TableError(f"{where}: linear {shape}, M = {m}: macro must be [rows, split_k]")
                cfg = LinearConfig(pair[0], pair[1], unroll)
                cfg.validate(f"{where}: linear {shape}, M = {m}")
                if cfg.rows > n or k % cfg.split_k:
                    raise TableError(f"{where}: linear {shape}, M = {m}: rows {cfg.rows} / split_k "
                                     f"{cfg.split_k} do not fit the shape")
                pairs.append((cfg.rows, cfg.split_k))
            linear[(n, k)] = (pairs, [int(u) for u in micro])
            if "seconds" in entry:
                linear_seconds[(n, k)] = _seconds(entry["seconds"], len(macro), f"{where}: linear {shape}")
        gemm = {}
        gemm_data = data.get("gemm") or {}
        if not isinstance(gemm_data, dict):
            raise TableError(f"{where}: 'gemm' must map NxK shapes to entries")
        for shape, entry in gemm_data.items():
            try:
                n, k = (int(x) for x in shape.split("x"))
            except ValueError:
                raise TableError(f"{where}: GEMM shape {shape!r} is not NxK") from None
            if not isinstance(entry, dict) or not all(isinstance(entry.get(f), list)
                                                      for f in ("configs", "choice", "seconds")):
                raise TableError(f"{where}: GEMM {shape} needs 'configs', 'choice' and 'seconds' lists")
            configs = [GemmConfig.from_key(c, f"{where}: GEMM {shape}") if isinstance(c, str) else None
                       for c in entry["configs"]]
            if not configs or None in configs:
                raise TableError(f"{where}: GEMM {shape}: 'configs' must be a non-empty list of configuration keys")
            choice = entry["choice"]
            if not choice or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(configs)
                                 for i in choice):
                raise TableError(f"{where}: GEMM {shape}: 'choice' must index 'configs' (0..{len(configs) - 1}), "
                                 "one per M from 1")
            seconds = _seconds(entry["seconds"], len(choice), f"{where}: GEMM {shape}")
            gemm[(n, k)] = (configs, list(choice), seconds)
        for shape, seconds in linear_seconds.items():
            if shape in gemm and len(seconds) > len(gemm[shape][1]):
                raise TableError(f"{where}: linear {shape[0]}x{shape[1]} covers more M than its GEMM entry")
        return cls(gpu, data["workers"], data["threads"], linear, where, linear_seconds, gemm)


def _seconds(values, count: int, where: str) -> list[float]:
    if not isinstance(values, list) or len(values) != count or \
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                    for v in values):
        raise TableError(f"{where}: 'seconds' must be {count} positive numbers, one per M from 1")
    return [float(v) for v in values]


def heuristic_linear(n: int, k: int, m: int, workers: int) -> LinearConfig:
    """About one tile per worker, no K split, four loads in flight."""
    return LinearConfig(max(1, math.ceil(n / workers)), 1, 4)


def choose_linear(n: int, k: int, m: int, *, table: TuningTable | None, workers: int) -> tuple[LinearConfig, str]:
    """The configuration and where it came from ("table <gpu>" or
    "heuristic: ..." when the table has no entry)."""
    if table is not None:
        try:
            return table.lookup(n, k, m), f"table {table.gpu}"
        except KeyError as err:
            return heuristic_linear(n, k, m, workers), f"heuristic: {err.args[0]}"
    return heuristic_linear(n, k, m, workers), "heuristic: no tuning table for this GPU"


def build_table(gpu: str, workers: int, threads: int, shapes: Sequence[tuple[int, int]], m_max: int,
                macro_candidates: Sequence[tuple[int, int]], micro_candidates: Sequence[int],
                models: dict[tuple[int, int, int], WaveModel], *, warps: int | None = None,
                token_group: int | None = None) -> TuningTable:
    """Precomputes the two-stage choice: for every shape and M, first the
    macro configuration with the lowest predicted latency (at the default
    micro configuration, the first candidate), then the best micro
    configuration for it. `models[(rows, split_k, unroll)]` predicts each
    configuration family. `warps` (row groups working in parallel in a
    tile; default threads / 32) and `token_group` (linear_problem) must be
    the ones the samples' trips were counted with."""
    warps = warps or max(1, threads // 32)
    linear = {}
    for n, k in shapes:
        macro_out, micro_out = [], []
        for m in range(1, m_max + 1):
            def cost(rows, split, unroll):
                cfg = LinearConfig(rows, split, unroll)
                tiles, trips = linear_problem(m, n, k, cfg, warps, token_group)
                return float(models[(rows, split, unroll)].predict(tiles, trips))

            fits = [(r, s) for r, s in macro_candidates if r <= n and k % s == 0]
            rows, split = min(fits, key=lambda rs: cost(rs[0], rs[1], micro_candidates[0]))
            unroll = min(micro_candidates, key=lambda u: cost(rows, split, u))
            macro_out.append((rows, split))
            micro_out.append(unroll)
        linear[(n, k)] = (macro_out, micro_out)
    return TuningTable(gpu, workers, threads, linear)


def linear_candidates(n: int, capacity: int, rows: Sequence[int] = (8, 16, 32, 64),
                      tiles_per_worker: Sequence[float] = (0.5, 1, 2, 4)) -> list[int]:
    """Candidate rows per tile of an N-row layer: the fixed `rows` that fit,
    and the wave-sized ones, whose tile count fills `c` tiles per worker
    (rows = ceil(n / (c * capacity))) for each c in `tiles_per_worker`. The
    heuristic's rows (c = 1) are among them."""
    for c in tiles_per_worker:
        if not c > 0:
            raise ValueError(f"tiles per worker must be positive, got {c!r}")
    sized = {max(1, math.ceil(n / max(1, round(c * capacity)))) for c in tiles_per_worker}
    return sorted({r for r in rows if r <= n} | {r for r in sized if r <= n})


def table_from_samples(gpu: str, workers: int, threads: int, samples: Iterable[dict], m_max: int) -> TuningTable:
    """The table from latencies measured at each shape's own (N, K), for
    every candidate configuration, at a few M (`samples`: dicts with n, k,
    m, seconds and either rows, split_k, unroll (et.linear; `kind`
    "linear" or absent) or `kind` "gemm" and `config`, a GemmConfig key).

    et.linear: a configuration's tiles, and so its wave regime, do not
    depend on M, and its latency grows with the passes over the weights
    (token_passes), so within the regime it is interpolated linearly in M
    between the measured M; the measured M must include 1 and
    min(m_max, LINEAR_M_MAX) for every configuration. For each M the
    fastest predicted configuration is stored (macro and micro together:
    the micro choice of one macro configuration can reverse the order of
    two others), with its predicted seconds.

    et.matmul: a configuration's tiles change with M only at multiples of
    its BM, so its latency is predicted per block of BM rows
    (gemm_curve) from samples at the block ends (gemm_sample_ms); the
    table then holds, per M up to m_max, the fastest configuration and its
    seconds. Shapes with M past LINEAR_M_MAX need GEMM samples."""
    curves: dict[tuple[int, int], dict[tuple[int, int, int], dict[int, float]]] = {}
    gemm_curves: dict[tuple[int, int], dict[GemmConfig, dict[int, float]]] = {}
    for s in samples:
        shape = (int(s["n"]), int(s["k"]))
        if s.get("kind", "linear") == "gemm":
            cfg = GemmConfig.from_key(s["config"], "sample")
            gemm_curves.setdefault(shape, {}).setdefault(cfg, {})[int(s["m"])] = float(s["seconds"])
        else:
            cfg = (int(s["rows"]), int(s["split_k"]), int(s["unroll"]))
            curves.setdefault(shape, {}).setdefault(cfg, {})[int(s["m"])] = float(s["seconds"])
    if not curves and not gemm_curves:
        raise ValueError("no samples")
    linear, linear_seconds = {}, {}
    linear_max = min(m_max, LINEAR_M_MAX)
    ms = np.arange(1, linear_max + 1)
    for (n, k), configs in sorted(curves.items()):
        predicted = []
        for (rows, split, unroll), points in sorted(configs.items()):
            if 1 not in points or max(points) < linear_max:
                raise ValueError(f"shape {n}x{k}, rows {rows} / unroll {unroll}: samples at M = "
                                 f"{sorted(points)} do not span 1..{linear_max}")
            at = sorted(points)
            predicted.append(((rows, split), unroll, np.interp(ms, at, [points[m] for m in at])))
        best = [min(predicted, key=lambda p: p[2][m - 1]) for m in ms]
        linear[(n, k)] = ([b[0] for b in best], [b[1] for b in best])
        linear_seconds[(n, k)] = [float(b[2][m - 1]) for b, m in zip(best, ms)]
    gemm = {}
    for (n, k), configs in sorted(gemm_curves.items()):
        order = sorted(configs, key=GemmConfig.key)
        predicted = [gemm_curve(cfg, configs[cfg], m_max, f"shape {n}x{k}, {cfg.key()}") for cfg in order]
        choice, seconds = [], []
        for m in range(1, m_max + 1):
            live = [(p[m - 1], i) for i, p in enumerate(predicted) if m <= len(p)]
            if not live:
                raise ValueError(f"shape {n}x{k}: no GEMM configuration serves M = {m}")
            t, i = min(live)
            choice.append(i)
            seconds.append(float(t))
        gemm[(n, k)] = (order, choice, seconds)
    if m_max > LINEAR_M_MAX:
        missing = sorted(set(curves) - set(gemm))
        if missing:
            raise ValueError(f"M up to {m_max} needs GEMM samples (et.linear serves at most {LINEAR_M_MAX} "
                             f"tokens); none for {', '.join(f'{n}x{k}' for n, k in missing)}")
    return TuningTable(gpu, workers, threads, linear, linear_seconds=linear_seconds, gemm=gemm)


# -- GEMM tiles (et.matmul) ---------------------------------------------------


@dataclass(frozen=True)
class GemmConfig:
    """A configuration of `event_tensor.kernels.gemm_kernel`: the et.matmul
    tile (BM, BN, BK), its ring depth, the threads per worker, the
    tensor-core instructions, the block order and the K split."""

    tile: tuple[int, int, int]
    stages: int
    threads: int
    mma: str = "wgmma"
    order: str = "auto"
    split_k: int = 1

    def key(self) -> str:
        bm, bn, bk = self.tile
        return f"{bm}x{bn}x{bk}-s{self.stages}-t{self.threads}-{self.mma}-{self.order}-k{self.split_k}"

    @classmethod
    def from_key(cls, key: str, where: str = "<memory>") -> "GemmConfig":
        try:
            tile, stages, threads, mma, order, split = key.split("-")
            bm, bn, bk = (int(v) for v in tile.split("x"))
            if not (stages[0] == "s" and threads[0] == "t" and split[0] == "k"):
                raise ValueError
            cfg = cls((bm, bn, bk), int(stages[1:]), int(threads[1:]), mma, order, int(split[1:]))
        except ValueError:
            raise TableError(f"{where}: {key!r} is not a GEMM configuration "
                             "(BMxBNxBK-s<stages>-t<threads>-<mma>-<order>-k<split>)") from None
        if cfg.mma not in ("wgmma", "sync") or cfg.order not in ("auto", "rows") or min(cfg.tile) < 16 or \
                cfg.stages < 1 or cfg.threads < 32 or cfg.split_k < 1:
            raise TableError(f"{where}: {key!r} has an out-of-range field")
        return cfg


def gemm_problem(m: int, n: int, k: int, cfg: GemmConfig) -> tuple[int, int]:
    """(tiles, trips) of an M x N x K product: the part tiles (blocks x
    split) and the BK-slices of one part's K range."""
    bm, bn, bk = cfg.tile
    tiles = math.ceil(m / bm) * math.ceil(n / bn) * cfg.split_k
    chunk = math.ceil(math.ceil(k / cfg.split_k) / bk) * bk
    return tiles, max(1, math.ceil(min(chunk, k) / bk))


GEMM_FORMAT = 1


@dataclass
class GemmModels:
    """One WaveModel per GEMM configuration, fitted on one GPU; the choice
    for a product is the configuration with the lowest predicted latency.
    One tile per worker is in flight, so the capacity is the workers.

    A product's features depend on M only through ceil(M / BM) of each
    configuration, which is the same for all M in a block of g rows
    (g = the gcd of the configurations' BM, ((j - 1) g, j g]): `choose`
    evaluates every configuration once per (N, K, block) and then answers
    from a dict, in O(1) (docs/experiments/2026-11-22-tuning-decision-time.md)."""

    gpu: str
    workers: int
    models: dict[GemmConfig, WaveModel]
    path: str = "<memory>"
    _choices: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def fit(cls, gpu: str, workers: int,
            samples: dict[GemmConfig, Iterable[tuple[int, int, int, float]]]) -> "GemmModels":
        """`samples[cfg]`: (M, N, K, latency) measurements of that configuration."""
        models = {}
        for cfg, points in samples.items():
            data = [(*gemm_problem(m, n, k, cfg), t) for m, n, k, t in points]
            models[cfg] = WaveModel(workers).fit(data)
        return cls(gpu, workers, models)

    def predict(self, m: int, n: int, k: int, cfg: GemmConfig) -> float:
        return float(self.models[cfg].predict(*gemm_problem(m, n, k, cfg)))

    def choose(self, m: int, n: int, k: int) -> GemmConfig:
        key = (n, k, m)
        choice = self._choices.get(key)
        if choice is not None and type(m) is int and type(n) is int and type(k) is int:
            return choice  # an M seen before
        for name, v in (("m", m), ("n", n), ("k", k)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"GEMM dimension {name} must be a positive int, got {v!r}")
        if not self.models:
            raise TableError(f"{self.path}: no GEMM configurations")
        block = math.gcd(*(cfg.tile[0] for cfg in self.models))
        first = (m - 1) // block * block + 1
        choice = self._choices.get((n, k, first))
        if choice is None:
            choice = min(self.models, key=lambda cfg: self.predict(first, n, k, cfg))
            self._choices[(n, k, first)] = choice
        self._choices[key] = choice
        return choice

    def to_json(self) -> dict:
        return {"format": GEMM_FORMAT, "gpu": self.gpu, "workers": self.workers,
                "models": {cfg.key(): [float(c) for c in model.coefficients] for cfg, model in self.models.items()}}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))

    @classmethod
    def load(cls, path: str | Path, *, gpu: str | None = None) -> "GemmModels":
        """Reads and validates the models; with `gpu`, they must be that GPU's."""
        return _load_for_gpu(cls, path, gpu, "GEMM models", "the models are")

    @classmethod
    def from_json(cls, data, where: str = "<memory>") -> "GemmModels":
        if not isinstance(data, dict) or data.get("format") != GEMM_FORMAT:
            raise TableError(f"{where}: GEMM models need a JSON object with format {GEMM_FORMAT}")
        gpu, workers = data.get("gpu"), data.get("workers")
        if not isinstance(gpu, str) or not gpu:
            raise TableError(f"{where}: 'gpu' must name the GPU")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise TableError(f"{where}: 'workers' must be a positive int, got {workers!r}")
        models = {}
        for key, coefficients in (data.get("models") or {}).items():
            cfg = GemmConfig.from_key(key, where)
            if not isinstance(coefficients, list) or len(coefficients) != 6 or \
                    not all(isinstance(c, (int, float)) and math.isfinite(c) for c in coefficients):
                raise TableError(f"{where}: {key}: coefficients must be 6 finite numbers")
            models[cfg] = WaveModel(workers, np.asarray(coefficients, np.float64))
        if not models:
            raise TableError(f"{where}: no GEMM configurations")
        return cls(gpu, workers, models, where)


def heuristic_gemm(m: int, n: int, k: int, workers: int) -> GemmConfig:
    """Without models: 64 x 128 tiles with a deep ring when 128 x 128 blocks
    would leave workers idle (small M: the product streams w), split in two
    when even those are fewer than the workers and K is long; 128 x 256
    tiles when they fill the workers at least twice; 128 x 128 otherwise."""
    blocks = math.ceil(m / 128) * math.ceil(n / 128)
    if blocks < workers:
        small = math.ceil(m / 64) * math.ceil(n / 128)
        split = 2 if small < workers and k >= 8192 else 1
        return GemmConfig((64, 128, 64), 6, 128, split_k=split)
    if math.ceil(m / 128) * math.ceil(n / 256) >= 2 * workers:
        return GemmConfig((128, 256, 64), 4, 256)
    return GemmConfig((128, 128, 64), 6, 256)


#: Largest M of the 16-row GEMM candidates: past it they read w once per
#: 16 rows, four times as often as 64-row tiles.
GEMM_SMALL_TILE_M_MAX = 64


def gemm_candidates(n: int, k: int) -> list[GemmConfig]:
    """The et.matmul configurations a table chooses among for an N x K
    layer: the decode tiles of `linear_tile="mma"` (16 rows, mma.sync, BN
    32 and 64, BK 128 where it divides K), 64 x 128 wgmma tiles whole and
    split in 2 and 4 (small M: more tiles than blocks), and the prefill
    tiles (128 x 128 with 3, 4 and 6 stages, mma.sync or wgmma, split in 4;
    128 x 256 in both block orders; 256 x 128). Split-K configurations need
    N to be a multiple of 4 and at least one BK slice per part."""
    bk = 128 if k % 128 == 0 else 64
    cands = [GemmConfig((16, 32, bk), 4, 256, "sync"), GemmConfig((16, 64, bk), 4, 256, "sync"),
             GemmConfig((64, 128, 64), 6, 128), GemmConfig((64, 128, 64), 6, 128, split_k=2),
             GemmConfig((64, 128, 64), 6, 128, split_k=4),
             GemmConfig((128, 128, 64), 3, 256, "sync"), GemmConfig((128, 128, 64), 4, 256),
             GemmConfig((128, 128, 64), 6, 256), GemmConfig((128, 128, 64), 6, 256, split_k=4),
             GemmConfig((128, 256, 64), 4, 256), GemmConfig((128, 256, 64), 4, 256, order="rows"),
             GemmConfig((256, 128, 64), 4, 512)]
    return [c for c in cands if c.split_k == 1 or (n % 4 == 0 and k >= c.split_k * c.tile[2])]


def gemm_m_max(cfg: GemmConfig, m_max: int) -> int:
    """The largest M a table considers `cfg` for."""
    return min(m_max, GEMM_SMALL_TILE_M_MAX) if cfg.tile[0] < 64 else m_max


def gemm_sample_ms(cfg: GemmConfig, m_max: int) -> list[int]:
    """The M at which a GEMM configuration is measured: 1 and the end of
    each block of BM rows up to gemm_m_max (its tile count changes only
    there)."""
    top = gemm_m_max(cfg, m_max)
    bm = cfg.tile[0]
    return sorted({1} | {min(j * bm, top) for j in range(1, -(-top // bm) + 1)})


def gemm_curve(cfg: GemmConfig, points: dict[int, float], m_max: int, where: str) -> list[float]:
    """Predicted seconds of `cfg` for M = 1..gemm_m_max(cfg, m_max), from
    measurements at M (`points`): within a block of BM rows (same tiles),
    linear between the measured M of the block, constant past the last one
    (the block's measured end). Every block needs its end measured."""
    top = gemm_m_max(cfg, m_max)
    bm = cfg.tile[0]
    out = []
    for j in range(1, -(-top // bm) + 1):
        lo, hi = (j - 1) * bm + 1, min(j * bm, top)
        at = sorted(m for m in points if lo <= m <= hi)
        if not at or at[-1] != hi:
            raise ValueError(f"{where}: no sample at M = {hi}, the end of rows {lo}..{hi} (measured at "
                             f"{sorted(points)})")
        out += [float(v) for v in np.interp(np.arange(lo, hi + 1), at, [points[m] for m in at])]
    return out


def choose_gemm(m: int, n: int, k: int, *, models: GemmModels | None, workers: int) -> tuple[GemmConfig, str]:
    """The GEMM configuration for an M x N x K product and where it came
    from ("models <gpu>", or "heuristic: ..." without models)."""
    if models is not None:
        return models.choose(m, n, k), f"models {models.gpu}"
    return heuristic_gemm(m, n, k, workers), "heuristic: no GEMM models for this GPU"


def choose_tile(n: int, k: int, m: int, *, table: TuningTable | None,
                workers: int) -> tuple[str, "LinearConfig | GemmConfig", str]:
    """The tile for an M x N x K linear layer: ("linear", LinearConfig, source)
    or ("gemm", GemmConfig, source), the one the table predicts fastest
    (source "table <gpu>"). Without a table or an entry: the et.linear
    heuristic up to LINEAR_M_MAX tokens, the GEMM heuristic above, with
    the reason in the source."""
    if table is not None and type(n) is int and type(k) is int and type(m) is int:
        # The fast path (per launch, for dynamic batch sizes): two indexings.
        tiles = table._tiles.get((n, k))
        if tiles is not None and 0 < m <= len(tiles):
            kind, cfg = tiles[m - 1]
            return kind, cfg, table._source
    for name, v in (("m", m), ("n", n), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"linear layer dimension {name} must be a positive int, got {v!r}")
    reason = "no tuning table for this GPU"
    if table is not None:
        # Valid dimensions the fast path did not answer: the table has no
        # entry for them, and lookup_tile says why.
        try:
            table.lookup_tile(n, k, m)
        except KeyError as err:
            reason = err.args[0]
    if m <= LINEAR_M_MAX:
        return "linear", heuristic_linear(n, k, m, workers), f"heuristic: {reason}"
    return "gemm", heuristic_gemm(m, n, k, workers), f"heuristic: {reason}"


# Tables shipped with the package, one file per GPU and kind
# (tables/<kind>-<gpu name, lower case, dashes>.json; kind: linear, gemm).
SHIPPED_TABLES = Path(__file__).resolve().parent / "tables"


def _slug(gpu: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in gpu.lower()).strip("-")


def shipped_gpus(kind: str = "linear") -> list[str]:
    """The GPUs (as the driver names them) with a shipped `kind` table."""
    out = []
    for path in sorted(SHIPPED_TABLES.glob(f"{kind}-*.json")):
        try:
            out.append(json.loads(path.read_text())["gpu"])
        except (OSError, ValueError, KeyError, TypeError):
            raise TableError(f"{path}: a shipped table without a 'gpu' field") from None
    return out


def shipped_gemm_models(gpu: str) -> GemmModels | None:
    """The GEMM models shipped for `gpu` (a device name as the driver gives
    it, such as "NVIDIA H200"), or None for a GPU without them. The H200's
    were fitted on benchmarks/results/2026-11-22-h200-gemm-final.json, the
    H100's on ...-2026-11-25-h100-gemm.json (`benchmarks/tune_gemm_eval.py
    --models`)."""
    path = SHIPPED_TABLES / f"gemm-{_slug(gpu)}.json"
    return GemmModels.load(path, gpu=gpu) if path.exists() else None


def shipped_linear_table(gpu: str) -> TuningTable | None:
    """The et.linear tuning table shipped for `gpu` (the driver's device
    name), or None. The shipped tables cover the linear shapes of
    Llama-3.2-1B, Qwen3-0.6B and Llama-3.1-8B: et.linear tiles for M 1..16
    and et.matmul tiles for M 1..512, with the predicted seconds of each
    (`lookup_tile` chooses between them). They were built by `event-tensor
    tune --gemm --m-max 512` (docs/tuning.md; measured 2026-11-25,
    benchmarks/results/2026-11-25-{h200,h100}-tune-gemm-samples.json)."""
    path = SHIPPED_TABLES / f"linear-{_slug(gpu)}.json"
    return TuningTable.load(path, gpu=gpu) if path.exists() else None


def load_linear_table(spec) -> TuningTable:
    """A tuning table from `spec`: a TuningTable, the path of a table file,
    or the name of a GPU with a shipped table (such as "NVIDIA H200")."""
    if isinstance(spec, TuningTable):
        return spec
    path = Path(spec)
    if path.exists():
        return TuningTable.load(path)
    table = shipped_linear_table(str(spec))
    if table is None:
        raise TableError(f"no tuning table file {str(spec)!r}, and no table ships for a GPU of that name "
                         f"(shipped: {', '.join(map(repr, shipped_gpus('linear'))) or 'none'})")
    return table
