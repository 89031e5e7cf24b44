"""The layering docs/design.md's "Layout" section states, checked on the sources and the build.

  check_layering.py SOURCE_DIR BUILD_DIR
  check_layering.py --self-test     (each rule catches a planted violation)

1. Includes go only to the same folder or an earlier one in LAYERS.
2. Torch headers (torch/, ATen/, c10/, caffe2/) appear only in torch_side/ and runtime/.
3. What rannc-run compiles in (cmd/rannc_run.cpp and runtime/, with every header they reach)
   stays within support/, ir/, plan/, runtime/, cmd/, the header-only files of torch_side/, its
   state-dict file format (torch_side/state_dict_file, which checkpoints share with export), its
   CPU/GPU differences and the tensor-parallel collectives and the attention cores' checkpoint
   (torch_side/tensor_parallel_ops, torch_side/recompute_cores: the library both rannc-run and the
   plugin load).
4. rannc-run links only the runtime's, plan's, IR's, support's and the state-dict format's libraries and needs no METIS,
   ONNX or protobuf; rannc-partition needs no libtorch (it loads the torch plugin on demand).
"""
import os
import re
import subprocess
import sys

LAYERS = ["support", "ir", "plan", "cost_model", "partitioner", "sharding", "emit", "compiler", "torch_side", "runtime", "cmd"]
TORCH_FOLDERS = {"torch_side", "runtime"}
RUNTIME_FOLDERS = {"support", "ir", "plan", "runtime", "cmd"}
# Compiled into librannc_state_dict.a, librannc_accelerator.a (the CPU/GPU differences) and
# librannc_tensor_parallel.so (the collectives the tensor ranks' stage files call, and the checkpoint
# of the attention cores that selective stages call).
RUNTIME_SHARED_TORCH = {"torch_side/state_dict_file.h", "torch_side/accelerator.h", "torch_side/tensor_parallel_ops.h",
                        "torch_side/recompute_cores.h"}
RUNTIME_ARCHIVES = {"librannc_runtime.a", "librannc_runtime_core.a", "librannc_plan.a", "librannc_ir.a",
                    "librannc_support.a", "librannc_state_dict.a", "librannc_accelerator.a"}
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]', re.M)
TORCH_HEADER = re.compile(r"^(torch|ATen|c10|caffe2)/")


def sources(root):
    for folder in LAYERS:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if name.endswith((".h", ".cpp")):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def includes(root, path):
    with open(os.path.join(root, path)) as f:
        text = f.read()
    for match in INCLUDE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        yield line, match.group(1) == "<", match.group(2)


def folder_of(path):
    return path.split("/")[0]


def check_sources(root):
    problems = []
    for path in sources(root):
        own = LAYERS.index(folder_of(path))
        for line, system, header in includes(root, path):
            if system and TORCH_HEADER.match(header) and folder_of(path) not in TORCH_FOLDERS:
                problems.append(f"{path}:{line}: includes <{header}>: torch headers belong in torch_side/ or runtime/")
            if not system and folder_of(header) in LAYERS and LAYERS.index(folder_of(header)) > own:
                problems.append(f"{path}:{line}: includes {header}: {folder_of(header)}/ comes after "
                                f"{folder_of(path)}/ in the layering")
    return problems


def header_only(root, header):
    return not os.path.exists(os.path.join(root, header[:-2] + ".cpp"))


def check_runtime_closure(root):
    """Every project header rannc-run's sources reach, transitively."""
    start = ["cmd/rannc_run.cpp"] + [p for p in sources(root) if folder_of(p) == "runtime"]
    seen, todo, problems = set(start), list(start), []
    while todo:
        path = todo.pop()
        for line, system, header in includes(root, path):
            if system or folder_of(header) not in LAYERS or header in seen:
                continue
            allowed = folder_of(header) in RUNTIME_FOLDERS or header in RUNTIME_SHARED_TORCH or (
                folder_of(header) == "torch_side" and header_only(root, header))
            if not allowed:
                problems.append(f"{path}:{line}: rannc-run reaches {header}, outside what the runtime may use")
            seen.add(header)
            todo.append(header)
    return problems


def needed(binary):
    out = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def check_links(build):
    problems = []
    with open(os.path.join(build, "build.ninja")) as f:
        line = next((l for l in f if l.startswith("build bin/rannc-run:")), None)
    if line is None:
        return [f"{build}/build.ninja: no link step for bin/rannc-run"]
    archives = {os.path.basename(a) for a in re.findall(r"\S+\.a\b", line)}
    if not archives:
        problems.append("rannc-run links no project library: the link line was not understood")
    for extra in sorted(archives - RUNTIME_ARCHIVES):
        problems.append(f"rannc-run links {extra}: it may link only {sorted(RUNTIME_ARCHIVES)}")
    run_libs = needed(os.path.join(build, "bin", "rannc-run"))
    for lib in run_libs:
        if re.match(r"lib(metis|onnx|onnx_proto|protobuf)\.", lib):
            problems.append(f"rannc-run needs {lib}: it only reads plans")
    for lib in needed(os.path.join(build, "bin", "rannc-partition")):
        if re.match(r"lib(torch|torch_cpu|c10)\.", lib):
            problems.append(f"rannc-partition needs {lib}: torch belongs in the plugin it loads on demand")
    if not any(lib.startswith("libtorch") for lib in run_libs):
        problems.append("rannc-run needs no libtorch: the dynamic section was not understood")
    return problems


def self_test():
    """Plants one violation of each source rule in a scratch tree; each must be reported."""
    import tempfile
    planted = {"support/a.h": '#include "plan/plan.h"\n',
               "ir/b.cpp": "#include <ATen/core/Tensor.h>\n",
               "runtime/c.cpp": '#include "torch_side/d.h"\n',
               "torch_side/d.h": '#include "compiler/e.h"\n',
               "torch_side/d.cpp": "",
               "compiler/e.h": ""}
    with tempfile.TemporaryDirectory() as root:
        for path, text in planted.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        os.makedirs(os.path.join(root, "cmd"))
        open(os.path.join(root, "cmd", "rannc_run.cpp"), "w").close()
        found = check_sources(root) + check_runtime_closure(root)
    expected = ["support/a.h:1: includes plan/plan.h", "ir/b.cpp:1: includes <ATen/core/Tensor.h>",
                "runtime/c.cpp:1: rannc-run reaches torch_side/d.h", "torch_side/d.h:1: rannc-run reaches compiler/e.h"]
    missing = [e for e in expected if not any(p.startswith(e) for p in found)]
    if missing or len(found) != len(expected):
        print(f"FAIL: planted violations {missing} not reported; reported {found}")
        sys.exit(1)
    print(f"each of the {len(expected)} planted violations is reported")


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root, build = sys.argv[1:3]
    problems = check_sources(root) + check_runtime_closure(root) + check_links(build)
    if problems:
        print("FAIL: the layering is broken:\n  " + "\n  ".join(problems))
        sys.exit(1)
    print(f"layering holds: {' -> '.join(LAYERS)}")


if __name__ == "__main__":
    main()
