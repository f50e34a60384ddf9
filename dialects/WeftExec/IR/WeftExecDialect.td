//===- WeftExecDialect.td - The Weft execution dialect -----*- tablegen -*-===//
#ifndef WEFTX_DIALECT_TD
#define WEFTX_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def WeftExec_Dialect : Dialect {
  let name = "weftx";
  let cppNamespace = "::mlir::weftx";
  let summary = "Per-role static execution programs: one module is one plan bundle";
  let description = [{
    The `weftx` dialect is level L2 of the lowering (docs/lowering.md) and
    maps one-to-one onto the plan bundle (docs/plan-format.md). A module
    holds the device mesh (`weftx.mesh`), communication group families
    (`weftx.group`), generated kernels (`weftx.kernel`), model parameters
    with their shards (`weftx.parameter`) and one `weftx.program` per role.
    A program declares its buffers (`weftx.buffer`: byte extents in the
    rank's arena or persistent region) and its streams (`weftx.stream`),
    each an ordered list of instructions, one op per plan opcode. Operands
    are byte ranges of buffers (`@buf[offset +: bytes]`), group family,
    kernel and buffer symbols, event ids and scalar fields, never SSA
    values: the program is already scheduled and every byte is placed.

    Bundle-wide metadata sits on the module as discardable attributes:
    `weftx.model`, `weftx.training`, `weftx.prediction` (all required to emit
    a bundle) and `weftx.config` (a free-form dictionary). See
    docs/exec-dialect.md.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    static constexpr ::llvm::StringLiteral kModelAttrName = "weftx.model";
    static constexpr ::llvm::StringLiteral kTrainingAttrName = "weftx.training";
    static constexpr ::llvm::StringLiteral kPredictionAttrName =
        "weftx.prediction";
    static constexpr ::llvm::StringLiteral kConfigAttrName = "weftx.config";
  }];
}

class Weftx_Op<string mnemonic, list<Trait> traits = []>
    : Op<WeftExec_Dialect, mnemonic, traits>;

class Weftx_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<WeftExec_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

#endif // WEFTX_DIALECT_TD
