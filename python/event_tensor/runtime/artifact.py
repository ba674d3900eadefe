"""Compiled artifacts: a binary (PTX/cubin for CUDA, a shared object for the
host) plus JSON metadata. Loading one needs no MLIR.

Loading an artifact runs its native code (a shared object in this process,
or a kernel on the GPU): load only artifacts you built or trust. What the
loader checks is that the directory is self-consistent: the binary is a
file of the directory (no path leads out of it) whose SHA-256 is the one
the compiler recorded, so a binary replaced or damaged after compiling (a
swapped file, a truncated cache entry) is refused instead of run."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import abi
from .errors import ArtifactError

__all__ = ["Artifact", "FORMAT_VERSION", "binary_digest", "load"]

#: 2: the metadata records the binary's SHA-256 (`binary_sha256`).
FORMAT_VERSION = 2
METADATA = "metadata.json"


def binary_digest(data: bytes) -> str:
    """The hex SHA-256 of a binary, as `metadata.json` records it."""
    return hashlib.sha256(data).hexdigest()


@dataclass
class Artifact:
    """A compiled kernel on disk: `path` holds metadata.json and the binary."""

    path: Path
    metadata: dict[str, Any]

    @property
    def target(self) -> str:
        return self.metadata["target"]

    @property
    def kernel(self) -> str:
        return self.metadata["kernel"]

    @property
    def binary_path(self) -> Path:
        return self.path / self.metadata["binary"]

    def launcher(self, **options):
        """A callable that launches this kernel (CPU threads or CUDA)."""
        if self.target == "cpu":
            from .cpu import CPULauncher

            return CPULauncher(self, **options)
        if self.target == "cuda":
            from .cuda import CUDALauncher, MultiDeviceCUDALauncher

            if int(self.metadata.get("devices", 1)) > 1:
                return MultiDeviceCUDALauncher(self, **options)
            return CUDALauncher(self, **options)
        raise ArtifactError(f"unknown artifact target {self.target!r}")

    def __call__(self, *args, **kwargs):
        return self.launcher()(*args, **kwargs)

    def copy_to(self, dest: str | Path) -> Path:
        """Copies the artifact's files into directory `dest` (created, or
        replaced file by file) and returns it, for example out of the
        compile cache into a folder that travels to another machine."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        for f in self.path.iterdir():
            if f.is_file():
                shutil.copy2(f, dest / f.name)
        return dest


def _check(metadata: dict[str, Any], path: Path, toolchain: str | None) -> None:
    if not isinstance(metadata, dict):
        raise ArtifactError(f"{path / METADATA}: not a JSON object")
    if "format" in metadata and metadata["format"] != FORMAT_VERSION:
        raise ArtifactError(
            f"{path}: artifact format {metadata['format']!r} is not supported (expected {FORMAT_VERSION}); recompile it"
        )
    for key in ("format", "target", "kernel", "entry", "workers", "arguments", "binary", "binary_sha256",
                "toolchain"):
        if key not in metadata:
            raise ArtifactError(f"{path / METADATA}: missing key {key!r}")
    binary = metadata["binary"]
    if not isinstance(binary, str) or not binary or Path(binary).name != binary or binary in (".", ".."):
        raise ArtifactError(f"{path / METADATA}: binary {binary!r} is not a file name in the artifact directory")
    if toolchain is not None and metadata["toolchain"] != toolchain:
        raise ArtifactError(
            f"{path}: built by toolchain {metadata['toolchain']!r}, this runtime is {toolchain!r}; recompile it"
        )
    abi.check(metadata, path)


def load(path: str | Path, *, expect_toolchain: str | None = "current") -> Artifact:
    """Loads the artifact in directory `path`. By default it must have been
    built by this version of event_tensor (`expect_toolchain=None` skips the
    check)."""
    path = Path(path)
    meta_path = path / METADATA
    try:
        metadata = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise ArtifactError(f"{path}: no {METADATA} (not an artifact directory)") from None
    except json.JSONDecodeError as err:
        raise ArtifactError(f"{meta_path}: invalid JSON: {err}") from None
    if expect_toolchain == "current":
        from .. import __version__

        expect_toolchain = f"event_tensor {__version__}"
    _check(metadata, path, expect_toolchain)
    artifact = Artifact(path, metadata)
    if not artifact.binary_path.is_file():
        raise ArtifactError(f"{path}: binary {metadata['binary']!r} is missing")
    if binary_digest(artifact.binary_path.read_bytes()) != metadata["binary_sha256"]:
        raise ArtifactError(f"{path}: binary {metadata['binary']!r} is not the one its metadata describes (its "
                            f"SHA-256 differs): replaced or damaged after compiling; recompile it")
    return artifact
