//===- Passes.td - Weft execution dialect passes -----------*- tablegen -*-===//
#ifndef WEFTEXEC_TRANSFORMS_PASSES_TD
#define WEFTEXEC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def WeftPlanMemory : Pass<"weft-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Place every weftx.buffer: liveness-based arena offsets and a "
                "packed persistent region";
  let description = [{
    For each `weftx.program`, assigns `offset` to every buffer and sets the
    program's `arena` and `persistent` sizes (existing offsets are
    replanned).

    Persistent buffers are packed in declaration order, each at the next
    multiple of its alignment.

    Arena buffers share bytes when their lifetimes are disjoint. Two buffers
    may overlap only if every access of one happens before every access of
    the other, where *happens before* is program order within a stream plus
    `record_event` -> `wait_event` edges between streams (vector clocks, the
    relation the plan verifier uses). An instruction that touches both
    buffers orders neither, so they conflict. This is conservative: two
    streams' instructions that no event chain orders are assumed to run at
    the same time. Buffers are placed largest first (ties: first access,
    then declaration order) at the best-fitting aligned gap among the
    already placed buffers they conflict with; a buffer that no instruction
    accesses conflicts with nothing and is placed at offset 0.

    The planned peak of a role is `arena + persistent`; with `report` the
    pass prints, per program, the arena size, the live lower bound (the most
    bytes live at once in one interleaving of the streams that respects the
    events), the persistent size, the planned peak and, when the module has
    a `weftx.prediction`, the predicted peak.
  }];
  let options = [
    Option<"report", "report", "bool", /*default=*/"false",
           "Print the planned memory of every program to stdout">,
  ];
}

def WeftGenerateKernels : Pass<"weft-generate-kernels", "::mlir::ModuleOp"> {
  let summary = "Write the CUDA C++ source of every weftx.kernel, specialized "
                "to its constants";
  let description = [{
    Sets the `source` of every `weftx.kernel` whose name (up to the first
    `.`) is a runtime registry kernel (docs/runtime.md, "Kernel ABI") to a
    self-contained CUDA C++ translation unit. It includes one header of
    `runtime/kernels/include/weft/kernels/` and calls its `WEFT_HD`
    functions with the kernel's constants (defaults applied) as `constexpr`s,
    so the compiler sees every shape.

    A kernel is one or more phases, each a `WEFT_HD` function of an item
    index (an element, a row, a column, ...). The source defines, per phase
    `i`, an `extern "C" __global__` entry `weft_<name>_<i>` run by one thread
    per item, whose pointer parameters are the launch's reads then its
    writes; `weft_<name>_launch(operands, stream)`, which launches the phases
    in order with the geometry documented in the header comment; and a host
    entry `weft_<name>_host(operands)` that runs every phase's items in
    order (the CUDA parts are under `__CUDACC__`, so the host entry also
    compiles as plain C++). Scratch arrays (attention's `delta`,
    cross-entropy's row log-sum-exp) are `__device__` arrays on the GPU.

    The pass checks the constants as the runtime does (unknown, missing,
    out of range) plus what the generated code relies on (an even
    `head_dim` for rotary, `heads` a multiple of `kv_heads`, enough position
    rows for `seq`), and that every `weftx.launch` of a generated kernel
    passes as many reads and writes as the entries take and no scalar
    `args`. A kernel with any other name keeps a one-line comment as its
    source and gets a warning. The output is deterministic.
  }];
}

#endif // WEFTEXEC_TRANSFORMS_PASSES_TD
