//===- Error.h - The executor's error type ----------------------*- C++ -*-===//
//
// Every failure of the executor (bundle rejected, data file unusable, kernel
// ABI mismatch, communication failure) is a weft::exec::Error whose message is
// one line, so weft-run can print it verbatim after "error: ".
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_ERROR_H
#define WEFT_EXEC_ERROR_H

#include <stdexcept>

namespace weft::exec {

class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

} // namespace weft::exec

#endif // WEFT_EXEC_ERROR_H
