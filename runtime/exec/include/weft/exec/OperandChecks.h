//===- OperandChecks.h - Backend-independent operand checks -----*- C++ -*-===//
//
// What every backend verifies at prepare() about the non-kernel compute
// opcodes, whatever device runs them: range sizes, dtypes and in-place
// operands. Each backend adds only its own limits (supported GEMM dtypes,
// overlapping copies, workspace sizing).
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_OPERANDCHECKS_H
#define WEFT_EXEC_OPERANDCHECKS_H

#include "weft/exec/KernelRegistry.h"
#include "weft/plan/Bundle.h"

#include <cstdint>
#include <string>
#include <vector>

namespace weft::exec {

/// f32, bf16 or f16: the storage dtypes the backends compute in fp32.
bool isFloatStorage(plan::DType dtype);

/// bf16 or f16: the 2-byte float storage a backend widens to fp32 around
/// compute and rounds back to nearest even afterwards.
bool isHalfFloat(plan::DType dtype);

/// Elements a column-major `rows x cols` matrix with leading dimension `ld`
/// spans.
int64_t matrixSpan(int64_t rows, int64_t cols, int64_t ld);

/// Rejects an instruction that touches a host-region buffer unless it is a
/// copy, a fill, or an optimizer_step or clip whose operands are all host
/// buffers
/// (the plan verifier's rule; checkOperands applies it first).
void checkHostOperands(const plan::Program &program,
                       const plan::Instruction &inst, const std::string &where);

/// Checks the operands of gemm (A, B, C spans), fill / grad_norm / clip
/// (dtype, whole elements, the f32 sum of squares) and optimizer_step (f32
/// master weights and moments, in-place updates, the optional low-precision
/// copy). `backend` ("CPU", "CUDA") names the backend in messages. Throws
/// Error("<where>: <reason>"); other opcodes are accepted unchanged.
void checkOperands(const plan::Program &program, const plan::Instruction &inst,
                   const std::string &where, const std::string &backend);

/// Checks a kernel launch against its registry signature for `constants`:
/// operand counts, dtypes (i32 index operands, f32, bf16 or f16 otherwise)
/// and exact byte sizes; `what` ("<where>: kernel 'name'") starts every
/// message. Returns the elements of bf16 and f16 operands, which a backend
/// widens to fp32.
int64_t checkKernelOperands(const plan::Program &program,
                            const plan::Instruction &inst,
                            const KernelSpec &spec,
                            const KernelConstants &constants,
                            const std::string &what);

/// The checks above as a backend's prepare() makes them, over a whole
/// program without running it: every instruction and gemm epilogue step
/// (checkKernelOperands for kernel launches, checkOperands with backend
/// "CPU" otherwise), collecting one message per refused instruction or step
/// ("role R stream S 'name' instruction I (phase): ...", the names
/// weft-run's refusal gives). A kernel missing from the registry is refused
/// as both backends refuse it; a launch of a kernel whose constants are
/// refused is left to kernelProblems. For tools that vet a plan ahead of
/// weft-run (weft-inspect verify); `program` must pass the plan verifier's
/// structural checks (its references resolve).
std::vector<std::string> operandProblems(const plan::Bundle &bundle,
                                         const plan::Program &program);

/// Generated sources (those with `// weft-launch:` lines) whose entries are
/// malformed or another kernel's (parseLaunches), one message each
/// ("kernels[i]: ..."). A session refuses such a bundle at open on every
/// backend, the CPU one too though it reads no source: the bundle is
/// corrupt, and one plan must not run on one backend and not on another.
std::vector<std::string> generatedSourceProblems(const plan::Bundle &bundle);

/// What a session refuses of the bundle's kernels themselves, one message
/// each ("kernels[i]: ..."): constants its registry kernel refuses
/// (resolveConstants), and generatedSourceProblems.
std::vector<std::string> kernelProblems(const plan::Bundle &bundle);

} // namespace weft::exec

#endif // WEFT_EXEC_OPERANDCHECKS_H
