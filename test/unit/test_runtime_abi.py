"""The runtime ABI: the compiler declares it (EventTensor/Conversion/RuntimeABI.h)
and writes it into each artifact's metadata; the runtime keeps its own copy
(event_tensor/runtime/abi.py). The two copies must agree for every kind of
artifact, and an artifact whose copy differs from the runtime's is refused
with an ArtifactError that names the field."""

import itertools
import json

import numpy as np
import pytest

import event_tensor as et
from event_tensor import runtime
from event_tensor._mlir_libs import _etDialects
from event_tensor.runtime import abi
from event_tensor.runtime.cpu import CPULauncher

COPY = """
et.kernel @copy(%out: memref<4xi64>) {
  %c4 = arith.constant 4 : index
  et.task @a tiles(%i) in (%c4) {
    %v = arith.index_cast %i : index to i64
    memref.store %v, %out[%i] : memref<4xi64>
  }
}
"""


@pytest.mark.parametrize("target,profile,devices", list(itertools.product(("cpu", "cuda"), (False, True), (1, 2))))
def test_compiler_and_runtime_agree(target, profile, devices):
    compiler = json.loads(_etDialects.runtime_abi_json(host_worker=target == "cpu", profile=profile,
                                                       multi_device=devices > 1))
    assert compiler == abi.expected(target, profile, devices)


def _edit(path, change):
    meta_path = path / "metadata.json"
    data = json.loads(meta_path.read_text())
    change(data)
    meta_path.write_text(json.dumps(data))


def test_mismatching_artifact_is_refused(tmp_path):
    art = et.compile(COPY, target="cpu", workers=2, cache_dir=tmp_path)
    assert art.metadata["abi"] == abi.expected("cpu", False, 1)
    assert art.metadata["entry"] == "copy" + abi.HOST_WORKER_SUFFIX
    out = np.zeros(4, np.int64)
    runtime.load(art.path).launcher()(out)
    assert out.tolist() == [0, 1, 2, 3]
    good = json.loads((art.path / "metadata.json").read_text())

    def refused(change, match):
        _edit(art.path, change)
        with pytest.raises(runtime.ArtifactError, match=match):
            runtime.load(art.path)
        (art.path / "metadata.json").write_text(json.dumps(good))

    refused(lambda m: m["abi"]["control"].update(trace_cursor=5),
            r"abi\.control\.trace_cursor: the artifact has 5, this runtime expects 4")
    refused(lambda m: m["abi"]["error"]["kinds"].update(timeout=7), r"abi\.error\.kinds\.timeout")
    refused(lambda m: m["abi"]["trace"].update(record_words=6), r"abi\.trace\.record_words")
    refused(lambda m: m["abi"].update(parameters=["epoch", "worker", "spin_limit", "counters", "control",
                                                  "error", "arguments"]), r"abi\.parameters")
    refused(lambda m: m["abi"]["globals"].update(dynamic_shared_bytes="__et_smem"),
            r"abi\.globals\.dynamic_shared_bytes")
    refused(lambda m: m["abi"]["control"].pop("abort"), r"abi\.control\.abort: missing in the artifact")
    refused(lambda m: m["abi"].update(version=abi.VERSION + 1), "runtime ABI version")
    refused(lambda m: m.pop("abi"), "the metadata has no 'abi'")
    # A profiled artifact passes a trace buffer: its parameters must say so.
    refused(lambda m: m.update(profile=True), r"abi\.parameters")

    # A launcher refuses an artifact that did not come through load().
    bad = runtime.Artifact(art.path, {**good, "abi": {**good["abi"], "entry_suffix": ""}})
    with pytest.raises(runtime.ArtifactError, match=r"abi\.entry_suffix"):
        CPULauncher(bad)
    # The original still loads and runs.
    runtime.load(art.path).launcher()(out)
