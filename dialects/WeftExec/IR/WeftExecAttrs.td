//===- WeftExecAttrs.td - Weft execution dialect attributes -*- tablegen -*-===//
#ifndef WEFTX_ATTRS_TD
#define WEFTX_ATTRS_TD

include "WeftExec/IR/WeftExecDialect.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

//===----------------------------------------------------------------------===//
// Enums (the spellings of docs/plan-format.md)
//===----------------------------------------------------------------------===//

def Weftx_Region : I32EnumAttr<"Region", "a rank's memory region", [
    I32EnumAttrCase<"persistent", 0>,
    I32EnumAttrCase<"arena", 1>,
    I32EnumAttrCase<"host", 2>,
  ]> {
  let cppNamespace = "::mlir::weftx";
}

def Weftx_GroupKind : I32EnumAttr<"GroupKind", "what a group spans", [
    I32EnumAttrCase<"tp", 0>,
    I32EnumAttrCase<"pp", 1>,
    I32EnumAttrCase<"dp", 2>,
    I32EnumAttrCase<"world", 3>,
    I32EnumAttrCase<"custom", 4>,
  ]> {
  let cppNamespace = "::mlir::weftx";
}

def Weftx_ReduceKind : I32EnumAttr<"ReduceKind", "a reduction", [
    I32EnumAttrCase<"sum", 0>,
    I32EnumAttrCase<"max", 1>,
    I32EnumAttrCase<"min", 2>,
  ]> {
  let cppNamespace = "::mlir::weftx";
}

def Weftx_GemmEpilogueKind : I32EnumAttr<"GemmEpilogueKind",
    "what a gemm computes after the product in its own call", [
    I32EnumAttrCase<"bias", 0>,
    I32EnumAttrCase<"gelu_bias", 1>,
    I32EnumAttrCase<"dgelu", 2>,
    I32EnumAttrCase<"bias_grad", 3>,
  ]> {
  let cppNamespace = "::mlir::weftx";
}

def Weftx_InitKind : I32EnumAttr<"InitKind", "how a parameter is initialized", [
    I32EnumAttrCase<"normal", 0>,
    I32EnumAttrCase<"zeros", 1>,
    I32EnumAttrCase<"ones", 2>,
  ]> {
  let cppNamespace = "::mlir::weftx";
}

/// The plan format's element types, as builtin types (u16/u8 are ui16/ui8).
def Weftx_ElementType : AnyTypeOf<[F32, F16, BF16, F64, I32, I64, UI16, UI8],
                                  "plan element type">;
def Weftx_ElementTypeAttr : TypeAttrOf<Weftx_ElementType>;

//===----------------------------------------------------------------------===//
// Attribute parameters
//===----------------------------------------------------------------------===//

/// A double (stored as an APFloat, which hashes), printed in the shortest
/// form that round-trips.
def Weftx_F64Parameter : APFloatParameter<"a double"> {
  let parser = [{ [&]() -> ::mlir::FailureOr<::llvm::APFloat> {
    double value;
    if ($_parser.parseFloat(value))
      return ::mlir::failure();
    return ::llvm::APFloat(value);
  }() }];
  let printer = [{ $_printer.printFloat($_self) }];
}

/// `true` or `false`.
def Weftx_BoolParameter : AttrParameter<"bool", "a boolean"> {
  let parser = [{ [&]() -> ::mlir::FailureOr<bool> {
    if (succeeded($_parser.parseOptionalKeyword("true")))
      return true;
    if ($_parser.parseKeyword("false"))
      return ::mlir::failure();
    return false;
  }() }];
  let printer = [{ $_printer << ($_self ? "true" : "false") }];
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

def Weftx_RangeAttr : Weftx_Attr<"Range", "range"> {
  let summary = "A byte range of one buffer of the enclosing program";
  let description = [{
    `[offset, offset + bytes)` of buffer `buffer`. Instructions print their
    ranges without the attribute wrapper, as `@buffer[offset +: bytes]`.
  }];
  let parameters = (ins "::mlir::FlatSymbolRefAttr":$buffer,
                        "int64_t":$offset, "int64_t":$bytes);
  let assemblyFormat = "`<` $buffer `[` $offset `+` `:` $bytes `]` `>`";
  let extraClassDeclaration = [{
    int64_t getEnd() const { return getOffset() + getBytes(); }
    /// Whether the two ranges share a byte (of one buffer).
    bool overlaps(RangeAttr other) const {
      return getBuffer() == other.getBuffer() &&
             getOffset() < other.getEnd() && other.getOffset() < getEnd();
    }
  }];
}

def Weftx_RangeArrayAttr : TypedArrayAttrBase<Weftx_RangeAttr,
                                              "array of byte ranges">;

def Weftx_ShardAttr : Weftx_Attr<"Shard", "shard"> {
  let summary = "Where one role keeps its part of a parameter";
  let description = [{
    The plan format's ShardSpec: the role's slice `[start, start + length)`
    along `dim` of the global tensor (`dim = -1`: the whole tensor, with
    `start = length = 0`), flattened row-major, zero-padded to
    `padded_elements` and split evenly over `zero_shards` ranks by DP index;
    buffer `buffer` of program `role` holds this rank's part at byte
    `offset`.

    ```mlir
    #weftx.shard<role = @r0, buffer = @w, offset = 0, dim = -1, start = 0,
                 length = 0, zero_shards = 2, padded_elements = 64>
    ```
  }];
  let parameters = (ins "::mlir::FlatSymbolRefAttr":$role,
                        "::mlir::FlatSymbolRefAttr":$buffer,
                        "int64_t":$offset, "int64_t":$dim, "int64_t":$start,
                        "int64_t":$length, "int64_t":$zero_shards,
                        "int64_t":$padded_elements);
  let assemblyFormat = "`<` struct(params) `>`";
}

def Weftx_ShardArrayAttr : TypedArrayAttrBase<Weftx_ShardAttr,
                                              "array of shard specs">;

def Weftx_ModelAttr : Weftx_Attr<"Model", "model"> {
  let summary = "The model a bundle trains";
  let parameters = (ins StringRefParameter<"model name">:$name,
                        StringRefParameter<"model family">:$family);
  let assemblyFormat = "`<` struct(params) `>`";
}

def Weftx_LossScaleAttr : Weftx_Attr<"LossScale", "loss_scale"> {
  let summary = "Static or dynamic loss scaling";
  let parameters = (ins Weftx_BoolParameter:$dynamic,
                        Weftx_F64Parameter:$initial,
                        "int64_t":$growth_interval,
                        Weftx_F64Parameter:$backoff);
  let assemblyFormat = "`<` struct(params) `>`";
}

def Weftx_TrainingAttr : Weftx_Attr<"Training", "training"> {
  let summary = "The bundle's training settings";
  let description = [{
    The `training` object of the plan format, field for field (see
    docs/plan-format.md): batch geometry, precision, AdamW and the LR
    schedule, gradient clipping and loss scaling.
  }];
  let parameters = (ins "int64_t":$global_batch, "int64_t":$seq_len,
                        StringRefParameter<"bf16, fp16 or fp32">:$precision,
                        "int64_t":$micro_batch, "int64_t":$grad_accum,
                        "int64_t":$steps_per_plan,
                        Weftx_F64Parameter:$lr, Weftx_F64Parameter:$min_lr,
                        "int64_t":$warmup_steps, "int64_t":$decay_steps,
                        Weftx_F64Parameter:$weight_decay,
                        Weftx_F64Parameter:$beta1, Weftx_F64Parameter:$beta2,
                        Weftx_F64Parameter:$eps, Weftx_F64Parameter:$grad_clip,
                        "LossScaleAttr":$loss_scale);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Weftx_PredictionAttr : Weftx_Attr<"Prediction", "prediction"> {
  let summary = "The planner's prediction for the bundle";
  let description = [{
    Predicted step time (seconds), model FLOP utilization and, per role in
    program order, the peak bytes (arena + persistent) of that role's ranks.
  }];
  let parameters = (ins Weftx_F64Parameter:$step_time_s,
                        ArrayRefParameter<"int64_t">:$peak_memory_bytes,
                        Weftx_F64Parameter:$mfu);
  let assemblyFormat = [{
    `<` `step_time_s` `=` $step_time_s `,` `peak_memory_bytes` `=` `[`
    $peak_memory_bytes `]` `,` `mfu` `=` $mfu `>`
  }];
}

#endif // WEFTX_ATTRS_TD
