//===- WeftDialect.td - The Weft model dialect -------------*- tablegen -*-===//
#ifndef WEFT_DIALECT_TD
#define WEFT_DIALECT_TD

include "mlir/IR/OpBase.td"

def Weft_Dialect : Dialect {
  let name = "weft";
  let cppNamespace = "::mlir::weft";
  let summary = "A transformer described at the level a parallelism planner reasons about";
  let description = [{
    The `weft` dialect describes a transformer for training. Parameters are
    explicit named values (`weft.param`) carrying their global shape, element
    type, initialization and Hugging Face tensor name. Layers are coarse ops
    (`weft.embedding`, `weft.layer_norm`, `weft.rms_norm`, `weft.attention`,
    `weft.mlp`, `weft.linear`, `weft.lm_head`, `weft.cross_entropy`); residual
    adds reuse `arith.addf` on tensors. Each transformer layer is one
    `weft.block`, an isolated region that holds its own parameters, so the
    unit that repeats is explicit and pipeline stages can take whole blocks.

    A model is a `func.func` carrying the discardable attribute
    `weft.model = "<family>"`; it takes token ids and labels and returns the
    scalar loss. Weight matrices are stored as `[in, out]` (activations are
    multiplied on the left); `hf_transposed` records that Hugging Face keeps the
    tensor as `[out, in]` (`nn.Linear`), so checkpoints can be exported exactly.
  }];
  let hasOperationAttrVerify = 1;
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::func::FuncDialect"];
  let extraClassDeclaration = [{
    /// The discardable attribute that marks a func.func as a Weft model.
    static constexpr ::llvm::StringLiteral kModelAttrName = "weft.model";
  }];
}

class Weft_Op<string mnemonic, list<Trait> traits = []>
    : Op<Weft_Dialect, mnemonic, traits>;

#endif // WEFT_DIALECT_TD
