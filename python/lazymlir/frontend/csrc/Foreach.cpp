// Foreach ops (_foreach_<op>[_], what optimizers call with foreach=True) as a
// C++ loop over their elements: each element is the per-tensor op ops._foreach
// chose at the op's first call (its plan), called through the dispatcher, so
// it reaches the fast path like any other op. Ops without a plan (their first
// call, norms, ops eager computes element by element and writes back) go to
// the Python handler.

#include "LazyTensor.h"

#include <ATen/ScalarOps.h>

#include <unordered_map>
#include <vector>

namespace lazymlir::device {

namespace {

struct Plan {
  c10::OperatorHandle op;  // the per-element op
  // Per formal of `op`: the foreach formal it takes (-1: its default), and
  // whether it takes element i of a list.
  std::vector<std::pair<int, bool>> sources;
  std::vector<bool> reads;  // per foreach formal: some source reads it
};
std::unordered_map<const c10::FunctionSchema*, Plan> gPlans;

bool takesTensor(const c10::Argument& formal) {
  c10::TypePtr t = formal.real_type();
  if (auto optional = t->cast<c10::OptionalType>()) t = optional->getElementType();
  return t->kind() == c10::TensorType::Kind;
}

// A number where the per-element op takes a tensor becomes a wrapped number,
// as Python's argument parser makes one (the op's Tensor overload was chosen).
c10::IValue elementArgument(const c10::Argument& formal, c10::IValue value) {
  if ((value.isDouble() || value.isInt() || value.isBool() || value.isComplexDouble()) && takesTensor(formal)) {
    at::Tensor wrapped = c10::scalar_to_tensor(value.toScalar());
    wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
    return wrapped;
  }
  return value;
}

}  // namespace

bool tryForeach(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto found = gPlans.find(&op.schema());
  if (found == gPlans.end()) return false;
  const Plan plan = found->second;  // a copy: an element's first call may forget the plans
  const size_t n = op.schema().arguments().size();
  c10::IValue* arguments = stack->data() + stack->size() - n;
  size_t length = 0;
  bool listed = false;
  for (const auto& [from, isList] : plan.sources) {
    if (from < 0 || !isList) continue;
    const c10::IValue& list = arguments[from];
    size_t size = list.toListRef().size();
    if (listed && size != length) return false;  // let the handler report it
    length = size;
    listed = true;
  }
  if (!listed) return false;
  // A foreach argument the plan does not read was left at its default by the
  // call that made it: any other value is Python's (`_foreach_norm`'s ord).
  for (size_t k = 0; k < n; ++k)
    if (!plan.reads[k] && !isDefault(op.schema().arguments()[k], arguments[k])) return false;
  const auto& formals = plan.op.schema().arguments();
  const bool functional = !op.schema().returns().empty();
  c10::List<at::Tensor> results;
  torch::jit::Stack element;
  for (size_t i = 0; i < length; ++i) {
    element.clear();
    for (size_t j = 0; j < formals.size(); ++j) {
      const auto& [from, isList] = plan.sources[j];
      if (from < 0) {
        element.push_back(*formals[j].default_value());
        continue;
      }
      const c10::IValue& v = arguments[from];
      element.push_back(elementArgument(formals[j], isList ? v.toListRef()[i] : v));
    }
    plan.op.callBoxed(element);
    if (functional) results.push_back(element.at(0).toTensor());
  }
  torch::jit::drop(*stack, n);
  if (functional) torch::jit::push(stack, std::move(results));
  return true;
}

void forgetForeach() { gPlans.clear(); }

namespace {

// ops._foreach's plan for `func`: `per` (an OpOverload) for each element,
// `sources` as in Plan.
void setPlan(py::object func, py::object per, std::vector<std::pair<int, bool>> sources) {
  auto schemaOf = [](py::object overload) {
    auto name = py::cast<std::string>(overload.attr("_schema").attr("name"));
    auto overloadName = py::cast<std::string>(overload.attr("_overloadname"));
    if (overloadName == "default") overloadName = "";
    return c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overloadName.c_str());
  };
  c10::OperatorHandle foreach = schemaOf(func), op = schemaOf(per);
  const auto& formals = op.schema().arguments();
  TORCH_CHECK(sources.size() == formals.size(), "lazymlir: a foreach plan needs one source per argument");
  for (size_t j = 0; j < formals.size(); ++j)
    TORCH_CHECK(sources[j].first >= 0 || formals[j].default_value().has_value(),
                "lazymlir: a foreach plan leaves out an argument without a default");
  const auto& schema = foreach.schema();
  const bool functional = !schema.returns().empty();
  TORCH_CHECK(!functional || (schema.returns().size() == 1 && op.schema().returns().size() == 1),
              "lazymlir: a foreach plan for an op with several results");
  std::vector<bool> reads(schema.arguments().size());
  for (const auto& [from, _] : sources) {
    TORCH_CHECK(from < static_cast<int>(reads.size()), "lazymlir: a foreach plan reads past the arguments");
    if (from >= 0) reads[from] = true;
  }
  gPlans.insert_or_assign(&schema, Plan{op, std::move(sources), std::move(reads)});
}

}  // namespace

void defineForeach(py::module_& m) {
  m.def(
      "foreach_planned",
      [](py::object func) {
        auto name = py::cast<std::string>(func.attr("_schema").attr("name"));
        auto overload = py::cast<std::string>(func.attr("_overloadname"));
        auto op = c10::Dispatcher::singleton().findSchema({name, overload == "default" ? "" : overload});
        return op.has_value() && gPlans.count(&op->schema()) != 0;
      },
      py::arg("func"), "Whether the foreach op `func` runs its elements from C++.");
  m.def("foreach_plan", &setPlan, py::arg("func"), py::arg("per"), py::arg("sources"),
        "ops._foreach: run `func`'s elements as `per` from C++ (sources: per argument of `per`, "
        "(foreach argument index or -1 for its default, whether it takes element i of a list)).");
}

}  // namespace lazymlir::device
