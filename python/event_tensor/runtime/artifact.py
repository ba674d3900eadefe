"""Compiled artifacts: a binary (PTX/cubin for CUDA, a shared object for the
host) plus JSON metadata. Loading one needs no MLIR."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import abi
from .errors import ArtifactError

__all__ = ["Artifact", "FORMAT_VERSION", "load"]

FORMAT_VERSION = 1
METADATA = "metadata.json"


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
    for key in ("format", "target", "kernel", "entry", "workers", "arguments", "binary", "toolchain"):
        if key not in metadata:
            raise ArtifactError(f"{path / METADATA}: missing key {key!r}")
    if metadata["format"] != FORMAT_VERSION:
        raise ArtifactError(
            f"{path}: artifact format {metadata['format']} is not supported (expected {FORMAT_VERSION})"
        )
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
    if not artifact.binary_path.exists():
        raise ArtifactError(f"{path}: binary {metadata['binary']!r} is missing")
    return artifact
