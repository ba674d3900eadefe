//===- et-opt.cpp - EventTensor optimizer driver --------------------------===//
//
// mlir-opt for the et dialect: parses, verifies, transforms and prints IR with
// the et dialect, its passes and the upstream dialects and passes the project
// lowers through.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::et::registerAllPasses();
  mlir::DialectRegistry registry;
  mlir::et::registerAllDialects(registry);
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "EventTensor optimizer driver\n", registry));
}
