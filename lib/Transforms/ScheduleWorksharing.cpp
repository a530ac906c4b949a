//===- ScheduleWorksharing.cpp - schedules of OpenMP loops ----------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/OpenMP/OpenMPDialect.h"

namespace lazymlir {
#define GEN_PASS_DEF_SCHEDULEWORKSHARINGPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

struct ScheduleWorksharingPass
    : lazymlir::impl::ScheduleWorksharingPassBase<ScheduleWorksharingPass> {
  using Base::Base;

  LogicalResult initialize(MLIRContext *context) override {
    kind = llvm::StringSwitch<std::optional<omp::ClauseScheduleKind>>(schedule)
               .Case("static", omp::ClauseScheduleKind::Static)
               .Case("guided", omp::ClauseScheduleKind::Guided)
               .Default(std::nullopt);
    if (!kind)
      return emitError(UnknownLoc::get(context))
             << "lazymlir-schedule-worksharing: unknown schedule '" << schedule
             << "' (expected static or guided)";
    return success();
  }

  void runOnOperation() override {
    getOperation().walk([&](omp::WsloopOp loop) {
      if (!loop.getScheduleKind())
        loop.setScheduleKindAttr(
            omp::ClauseScheduleKindAttr::get(&getContext(), *kind));
    });
  }

  std::optional<omp::ClauseScheduleKind> kind;
};

} // namespace
