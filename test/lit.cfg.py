# -*- Python -*-
"""lit configuration of the EventTensor test suite."""

import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "EVENT_TENSOR"
# lit 23 from PyPI: run RUN lines with lit's internal shell.
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.et_obj_root, "test")
# `unit/` is the pytest suite; `lit.cfg.py` and friends are not tests.
config.excludes = ["CMakeLists.txt", "README.md", "lit.cfg.py", "lit.site.cfg.py", "unit", "fuzz"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%PYTHON", config.python_executable))

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

# The MLIR tools (mlir-opt, mlir-translate) live next to, not in, LLVM's tools.
tool_dirs = [config.et_tools_dir, config.mlir_tools_dir, config.llvm_tools_dir]
tools = ["et-opt", ToolSubst("mlir-translate", unresolved="ignore"), ToolSubst("llc", unresolved="ignore")]
llvm_config.add_tool_substitutions(tools, tool_dirs)

if config.enable_python:
    # Python tests import the package assembled in the build tree.
    llvm_config.with_environment("PYTHONPATH", [config.et_python_packages_dir], append_path=True)
    config.available_features.add("python")

if config.enable_cuda_tests:
    config.available_features.add("cuda")
