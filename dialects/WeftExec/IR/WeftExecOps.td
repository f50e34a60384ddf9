//===- WeftExecOps.td - Weft execution dialect operations --*- tablegen -*-===//
#ifndef WEFTX_OPS_TD
#define WEFTX_OPS_TD

include "WeftExec/IR/WeftExecAttrs.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"

//===----------------------------------------------------------------------===//
// Bundle-level ops
//===----------------------------------------------------------------------===//

def Weftx_MeshOp : Weftx_Op<"mesh", [HasParent<"::mlir::ModuleOp">]> {
  let summary = "The device mesh: dp x pp x tp ranks";
  let description = [{
    World size is `dp * pp * tp`; rank order is
    `rank = (dp_idx * PP + pp_idx) * TP + tp_idx`. A module holds one mesh,
    and its verifier checks the bundle-wide rank tables: every rank of the
    mesh is served by exactly one `weftx.program`, and every group member is
    a rank of the mesh.

    ```mlir
    weftx.mesh dp 2 pp 1 tp 1
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntPositive]>:$dp,
                       ConfinedAttr<I64Attr, [IntPositive]>:$pp,
                       ConfinedAttr<I64Attr, [IntPositive]>:$tp);
  let assemblyFormat = "`dp` $dp `pp` $pp `tp` $tp attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getWorldSize() { return getDp() * getPp() * getTp(); }
  }];
}

def Weftx_GroupOp : Weftx_Op<"group", [HasParent<"::mlir::ModuleOp">,
                                       Symbol]> {
  let summary = "A family of communication groups";
  let description = [{
    A family is a set of disjoint groups of the same size, e.g. all TP groups
    of the mesh. A collective names a family; a rank executing it uses the
    group of the family that contains the rank, so ranks that share a program
    (the DP replicas of a pipeline stage) can talk to different groups.
    Members are global ranks, in group-relative order: a member's position in
    its group is its index for `all_gather` output blocks, `reduce_scatter`
    input blocks and the `root`/`peer` of `broadcast`/`send`/`recv`. Group
    family ids in the bundle follow declaration order.

    The groups are stored flat (`ranks`, group after group) with their common
    size (`group_size`) and printed nested:

    ```mlir
    weftx.group @dp dp [[0, 2], [1, 3]]
    weftx.group @world world [[0, 1, 2, 3]]
    ```

    From C++, `GroupOp::create(builder, loc, "pp", GroupKind::pp, ranks,
    groupSize)` with `ranks` an `ArrayRef<int64_t>` listing the groups one
    after another.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Weftx_GroupKind:$kind,
                       DenseI64ArrayAttr:$ranks,
                       ConfinedAttr<I64Attr, [IntPositive]>:$group_size);
  let assemblyFormat = [{
    $sym_name $kind custom<GroupFamily>($ranks, $group_size) attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The number of groups of the family.
    int64_t getNumGroups() {
      return int64_t(getRanks().size()) / int64_t(getGroupSize());
    }
    /// Group `index` of the family, in group-relative order.
    ::llvm::ArrayRef<int64_t> getGroup(int64_t index) {
      return getRanks().slice(index * getGroupSize(), getGroupSize());
    }
  }];
}

def Weftx_KernelOp : Weftx_Op<"kernel", [HasParent<"::mlir::ModuleOp">,
                                         Symbol]> {
  let summary = "A generated kernel and its source";
  let description = [{
    The kernel's name is its symbol; `file` is the bundle-relative path its
    `source` is written to, and `constants` its integer specialization
    constants. Kernel ids follow declaration order.

    ```mlir
    weftx.kernel @embed file "kernels/embed.cu" constants {hidden = 16 : i64} source "..."
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$file,
                       DictionaryAttr:$constants, StrAttr:$source);
  let assemblyFormat = [{
    $sym_name `file` $file `constants` $constants `source` $source attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The runtime registry kernel it specializes: its name up to the first
    /// `.` (`name.N` specializes `name`; docs/runtime.md).
    ::llvm::StringRef getRegistryName() {
      return getSymName().split('.').first;
    }
  }];
}

def Weftx_ParameterOp : Weftx_Op<"parameter", [
    HasParent<"::mlir::ModuleOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "A model parameter and where each role keeps it";
  let description = [{
    The global shape and element type, the initialization (`normal` takes a
    positive standard deviation), the Hugging Face tensor name (and whether
    Weft stores it transposed), and one `#weftx.shard` per role holding part
    of it.

    ```mlir
    weftx.parameter "wte" [64, 16] f32 init normal(2.000000e-02)
        hf "transformer.wte.weight" shards [#weftx.shard<...>]
    ```
  }];
  let arguments = (ins StrAttr:$name, DenseI64ArrayAttr:$shape,
                       Weftx_ElementTypeAttr:$dtype, Weftx_InitKind:$init,
                       OptionalAttr<F64Attr>:$init_std, StrAttr:$hf_name,
                       UnitAttr:$hf_transposed, Weftx_ShardArrayAttr:$shards);
  let assemblyFormat = [{
    $name $shape $dtype `init` $init (`(` $init_std^ `)`)? `hf` $hf_name
    (`hf_transposed` $hf_transposed^)? `shards` $shards attr-dict
  }];
  let hasVerifier = 1;
}

def Weftx_ProgramOp : Weftx_Op<"program", [
    HasParent<"::mlir::ModuleOp">, Symbol, SymbolTable, IsolatedFromAbove,
    NoTerminator, SingleBlock, NoRegionArguments]> {
  let summary = "The program of one role";
  let description = [{
    What every rank in `ranks` executes (ranks doing the same work share a
    role). The body declares `weftx.buffer`s and `weftx.stream`s; role ids
    follow declaration order and the event count is one more than the
    largest event id used. `arena`, `persistent` and `host` are the planned
    region sizes in bytes, set by `weft-plan-memory` together with buffer
    offsets (`host` only when the program has host buffers: optimizer
    offload).

    ```mlir
    weftx.program @r0 ranks [0, 1] arena 640 persistent 128 {
      weftx.buffer @w persistent size 128 align 64 offset 0 : f32
      weftx.stream "compute" { ... }
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, DenseI64ArrayAttr:$ranks,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$arena_size,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$persistent_size,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$host_size);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name `ranks` $ranks (`arena` $arena_size^)?
    (`persistent` $persistent_size^)? (`host` $host_size^)?
    attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    auto getBuffers() { return getBody().getOps<BufferOp>(); }
    auto getStreams() { return getBody().getOps<StreamOp>(); }
    /// One more than the largest event id used (0 without events).
    int64_t getNumEvents();
  }];
}

def Weftx_BufferOp : Weftx_Op<"buffer", [HasParent<"ProgramOp">, Symbol]> {
  let summary = "A byte extent in the rank's arena or persistent region";
  let description = [{
    `size` bytes of elements of the given type, aligned to `alignment` (a
    power of two). `offset` (from the start of the region) is absent until
    `weft-plan-memory` places the buffer. Buffer ids follow declaration
    order.

    ```mlir
    weftx.buffer @act arena size 256 align 64 offset 256 : f32
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Weftx_Region:$region,
                       ConfinedAttr<I64Attr, [IntPositive]>:$size,
                       ConfinedAttr<I64Attr, [IntPositive]>:$alignment,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$offset,
                       Weftx_ElementTypeAttr:$dtype);
  let assemblyFormat = [{
    $sym_name $region `size` $size `align` $alignment (`offset` $offset^)?
    attr-dict `:` $dtype
  }];
  let hasVerifier = 1;
}

def Weftx_StreamOp : Weftx_Op<"stream", [HasParent<"ProgramOp">, NoTerminator,
                                         SingleBlock, NoRegionArguments]> {
  let summary = "An ordered list of instructions";
  let description = [{
    Streams of a program run concurrently; the instructions of one stream run
    in order. Events (`weftx.record_event` / `weftx.wait_event`) are the only
    ordering between streams. Names are unique in the program.

    ```mlir
    weftx.stream "compute" {
      weftx.load_batch 0 writes(@tokens[0 +: 64]) phase "data"
    }
    ```
  }];
  let arguments = (ins StrAttr:$name);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$name attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Instructions
//===----------------------------------------------------------------------===//

def Weftx_InstructionOpInterface : OpInterface<"InstructionOpInterface"> {
  let cppNamespace = "::mlir::weftx";
  let description = [{
    An instruction of a `weftx.stream`: one plan opcode with exactly the byte
    ranges it reads and writes, and an optional phase label.
  }];
  let methods = [
    InterfaceMethod<"The byte ranges read, in operand order",
                    "::mlir::ArrayAttr", "getReads">,
    InterfaceMethod<"The byte ranges written, in operand order",
                    "::mlir::ArrayAttr", "getWrites">,
    InterfaceMethod<"The phase label for inspection",
                    "::std::optional<::llvm::StringRef>", "getPhase">,
  ];
  let extraSharedClassDeclaration = [{
    auto getReadRanges() {
      return $_op.getReads().template getAsRange<::mlir::weftx::RangeAttr>();
    }
    auto getWriteRanges() {
      return $_op.getWrites().template getAsRange<::mlir::weftx::RangeAttr>();
    }
  }];
}

/// An instruction: `fields` are its opcode-specific operands, printed by
/// `fieldFormat`, followed by `reads(...) writes(...) phase "..."`.
class Weftx_InstrOp<string mnemonic, dag fields, string fieldFormat,
                    list<Trait> traits = []>
    : Weftx_Op<mnemonic, traits # [HasParent<"StreamOp">,
                                   Weftx_InstructionOpInterface]> {
  let arguments = !con(fields, (ins
      DefaultValuedAttr<Weftx_RangeArrayAttr, "{}">:$reads,
      DefaultValuedAttr<Weftx_RangeArrayAttr, "{}">:$writes,
      OptionalAttr<StrAttr>:$phase));
  let assemblyFormat = fieldFormat # [{
    (`reads` `(` custom<Ranges>($reads)^ `)`)?
    (`writes` `(` custom<Ranges>($writes)^ `)`)? (`phase` $phase^)? attr-dict
  }];
  let hasVerifier = 1;
}

def Weftx_Count : ConfinedAttr<I64Attr, [IntPositive]>;
def Weftx_Index : ConfinedAttr<I64Attr, [IntNonNegative]>;

class Weftx_CollectiveOp<string mnemonic, dag fields, string fieldFormat>
    : Weftx_InstrOp<mnemonic, fields, fieldFormat,
                    [DeclareOpInterfaceMethods<SymbolUserOpInterface>]>;

def Weftx_LaunchOp : Weftx_InstrOp<"launch",
    (ins FlatSymbolRefAttr:$kernel, OptionalAttr<DenseI64ArrayAttr>:$args),
    "$kernel (`args` $args^)?",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Run a generated kernel (opcode `kernel`)";
  let description = [{
    The kernel's pointer parameters are the read ranges then the write
    ranges, in order, followed by the scalar `args`.

    ```mlir
    weftx.launch @embed args [1] reads(@tokens[0 +: 64]) writes(@act[0 +: 256])
    ```
  }];
  let hasVerifier = 0;
}

def Weftx_GemmOp : Weftx_InstrOp<"gemm",
    (ins Weftx_ElementTypeAttr:$dtype, UnitAttr:$trans_a, UnitAttr:$trans_b,
         Weftx_Count:$m, Weftx_Count:$n, Weftx_Count:$k, Weftx_Count:$lda,
         Weftx_Count:$ldb, Weftx_Count:$ldc, F64Attr:$alpha, F64Attr:$beta,
         OptionalAttr<Weftx_GemmEpilogueKind>:$epilogue,
         OptionalAttr<FlatSymbolRefArrayAttr>:$epilogue_kernels),
    [{ $dtype (`trans_a` $trans_a^)? (`trans_b` $trans_b^)? `m` $m `n` $n `k` $k
       `lda` $lda `ldb` $ldb `ldc` $ldc `alpha` $alpha `beta` $beta
       (`epilogue` $epilogue^ $epilogue_kernels)? }],
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Column-major BLAS C = alpha * op(A) * op(B) + beta * C";
  let extraClassDeclaration = [{
    /// The registry names of the kernels `epilogue` folds, in order.
    static ::llvm::ArrayRef<::llvm::StringLiteral>
    getEpilogueKernelNames(GemmEpilogueKind epilogue);
    /// Extra reads and writes of `epilogue` after the product's.
    static std::pair<unsigned, unsigned>
    getEpilogueOperands(GemmEpilogueKind epilogue);
  }];
  let description = [{
    Reads A and B, and C (`reads[2]`, equal to `writes[0]`) exactly when
    `beta != 0`; writes C. Each range must hold its column-major matrix with
    the given leading dimension.

    ```mlir
    weftx.gemm f32 m 4 n 4 k 8 lda 4 ldb 8 ldc 4 alpha 1.0 beta 0.0
        reads(@a[0 +: 128], @b[0 +: 128]) writes(@c[0 +: 64])
    ```

    An `epilogue` (set by `weft-fuse-gemm-epilogues`) computes the kernels
    `epilogue_kernels` that ran right after the gemm, inside it; their extra
    operands follow the product's:

    | epilogue | kernels | extra reads | extra writes |
    |---|---|---|---|
    | `bias` | bias_add | bias | |
    | `gelu_bias` | bias_add, activation_forward | bias | activation |
    | `dgelu` | activation_backward | activation input | |
    | `bias_grad` | bias_grad | | bias gradient (written, not added to) |

    `gelu_bias` and `dgelu` need `beta` 0; all but `bias_grad` need
    `ldc == m`, and `bias_grad` (the sum of A's columns) A untransposed with
    `lda == m`.

    ```mlir
    weftx.gemm bf16 m 256 n 32 k 64 lda 256 ldb 64 ldc 256 alpha 1.0 beta 0.0
        epilogue gelu_bias [@bias_add, @activation_forward]
        reads(@w[0 +: 32768], @x[0 +: 4096], @b[0 +: 512])
        writes(@up[0 +: 16384], @act[0 +: 16384])
    ```
  }];
}

def Weftx_LoadBatchOp : Weftx_InstrOp<"load_batch", (ins Weftx_Index:$microbatch),
                                      "$microbatch"> {
  let summary = "Load this rank's share of a micro-batch as i32 token ids";
  let description = [{
    Writes the tokens (and optionally the targets) of micro-batch
    `microbatch` (in `[0, grad_accum)`) of the current step.
  }];
}

def Weftx_CopyOp : Weftx_InstrOp<"copy", (ins), ""> {
  let summary = "Byte copy from one range to another of the same size";
}

def Weftx_FillOp : Weftx_InstrOp<"fill",
    (ins Weftx_ElementTypeAttr:$dtype, F64Attr:$value), "$dtype $value"> {
  let summary = "Set every element of the written ranges to a value";
}

def Weftx_AllReduceOp : Weftx_CollectiveOp<"all_reduce",
    (ins Weftx_ReduceKind:$reduce, Weftx_Count:$count,
         Weftx_ElementTypeAttr:$dtype, FlatSymbolRefAttr:$group),
    "$reduce $count `x` $dtype `on` $group"> {
  let summary = "Element-wise reduction over a group";
  let description = [{
    Member i reduces read range i into write range i (the two may
    coincide); `count` is the members' elements in all. One member per
    collective call, issued together as one coalesced launch (one NCCL
    group); members may not write bytes another member reads or writes.

    ```mlir
    weftx.all_reduce sum 64 x f32 on @dp0 reads(@g[0 +: 256]) writes(@g[0 +: 256])
    weftx.all_reduce sum 96 x f32 on @tp reads(@g[0 +: 256], @g[512 +: 128])
        writes(@g[0 +: 256], @g[512 +: 128])
    ```
  }];
}

def Weftx_ReduceScatterOp : Weftx_CollectiveOp<"reduce_scatter",
    (ins Weftx_ReduceKind:$reduce, Weftx_Count:$count,
         Weftx_ElementTypeAttr:$dtype, FlatSymbolRefAttr:$group),
    "$reduce $count `x` $dtype `on` $group"> {
  let summary = "Reduce, then rank i of the group keeps block i";
  let description = [{
    Member j reads `c_j x group size` elements (read range j) and writes
    its `c_j` (write range j); `count` is the sum of the `c_j`. Members are
    issued together (as `all_reduce`) and must be independent.

    ```mlir
    weftx.reduce_scatter sum 48 x f32 on @dp reads(@grads[0 +: 256], @grads[256 +: 128])
        writes(@grads.shard[0 +: 128], @grads.shard[128 +: 64])
    ```
  }];
}

def Weftx_AllGatherOp : Weftx_CollectiveOp<"all_gather",
    (ins Weftx_Count:$count, Weftx_ElementTypeAttr:$dtype,
         FlatSymbolRefAttr:$group),
    "$count `x` $dtype `on` $group"> {
  let summary = "Block i of the output is rank i's input";
  let description = [{
    Member j reads `c_j` elements (read range j, which may be this rank's
    block of its output) and writes `c_j x group size` (write range j);
    `count` is the sum of the `c_j`. Members are issued together (as
    `all_reduce`) and must be independent.
  }];
}

def Weftx_BroadcastOp : Weftx_CollectiveOp<"broadcast",
    (ins Weftx_Count:$count, Weftx_ElementTypeAttr:$dtype,
         FlatSymbolRefAttr:$group, Weftx_Index:$root),
    "$count `x` $dtype `on` $group `root` $root"> {
  let summary = "Copy the root's buffer to every member";
  let description = [{
    Writes `count` elements; `root` is group-relative and reads the range.
  }];
}

def Weftx_SendOp : Weftx_CollectiveOp<"send",
    (ins Weftx_Count:$count, Weftx_ElementTypeAttr:$dtype,
         FlatSymbolRefAttr:$group, Weftx_Index:$peer),
    "$count `x` $dtype `on` $group `to` $peer"> {
  let summary = "Send `count` elements to a group-relative peer";
}

def Weftx_RecvOp : Weftx_CollectiveOp<"recv",
    (ins Weftx_Count:$count, Weftx_ElementTypeAttr:$dtype,
         FlatSymbolRefAttr:$group, Weftx_Index:$peer),
    "$count `x` $dtype `on` $group `from` $peer"> {
  let summary = "Receive `count` elements from a group-relative peer";
}

def Weftx_RecordEventOp : Weftx_InstrOp<"record_event", (ins Weftx_Index:$event),
                                        "$event"> {
  let summary = "Mark the completion of everything issued before on the stream";
  let description = [{
    Each event is recorded at most once per program.
  }];
}

def Weftx_WaitEventOp : Weftx_InstrOp<"wait_event", (ins Weftx_Index:$event),
                                      "$event"> {
  let summary = "Block the stream until an event is recorded";
}

def Weftx_OptimizerStepOp : Weftx_InstrOp<"optimizer_step",
    (ins Weftx_Count:$count, Weftx_ElementTypeAttr:$dtype),
    "$count `x` $dtype"> {
  let summary = "AdamW over `count` elements";
  let description = [{
    Reads param, grad, exp_avg, exp_avg_sq and optionally the f32 global
    sum of squares of the gradients; writes param, exp_avg, exp_avg_sq and
    optionally a low-precision copy of the parameter. With the sum, the step
    clips the gradients itself (each is multiplied by
    `min(1, grad_clip / norm)` on the way into the update, where `norm` is
    the square root of the sum divided by the loss scale) and, under
    dynamic loss scaling, leaves everything unchanged when the sum is not
    finite: one pass over the gradients fewer than `clip`, and a skip the
    device decides.
  }];
}

def Weftx_GradNormOp : Weftx_InstrOp<"grad_norm", (ins Weftx_ElementTypeAttr:$dtype),
                                     "$dtype"> {
  let summary = "Sum of squares of gradients into one f32";
}

def Weftx_ClipOp : Weftx_InstrOp<"clip", (ins Weftx_ElementTypeAttr:$dtype),
                                 "$dtype"> {
  let summary = "Scale gradients in place by min(1, grad_clip / sqrt(sum))";
  let description = [{
    `reads[0]` is the f32 sum of squares; `reads[1..]` are the gradients,
    which are also the writes, in the same order.
  }];
}

def Weftx_ReleaseOp : Weftx_InstrOp<"release", (ins), ""> {
  let summary = "The contents of an arena range are dead";
  let description = [{
    ZeRO-3 frees a gathered parameter after its last use; reading the range
    again before a new write is an error.
  }];
}

#endif // WEFTX_OPS_TD
