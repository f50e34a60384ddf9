# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "WEFT"
# Bash, not lit's internal shell: CLI tests check exit codes with $?.
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.weft_obj_root, "test", "lit")

config.substitutions.append(("%weft_src", config.weft_src_root))
config.substitutions.append(("%weft_obj", config.weft_obj_root))
config.substitutions.append(("%python", "python3"))
llvm_config.with_system_environment(["HOME", "TMPDIR"])
llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(["weft-opt", "weftc"], [config.weft_tools_dir])
