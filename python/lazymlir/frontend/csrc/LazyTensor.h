// The lazy device's TensorImpl and what the kernels share (lazymlir._device;
// links libtorch, knows nothing of MLIR).

#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <utility>

namespace lazymlir::device {

namespace py = pybind11;

constexpr c10::DeviceType kLazy = c10::DeviceType::PrivateUse1;

// tensor.State.copy (unbound): set by install().
extern PyObject* gCopyState;

// Releases a tensor's state on any thread. Waiting for the GIL on a thread
// other than the main one would let the interpreter's shutdown end that
// thread inside a destructor (pthread_exit, which a destructor cannot
// survive: std::terminate, seen once in a loaded full test run; autograd's
// device thread frees tensors after the backward it ran has returned): such
// a thread leaves the state to the next lazy op or barrier
// (releaseDropped).
void releaseState(PyObject* state);

// Releases the states dropped without the GIL (GIL held).
void releaseDroppedStates();
extern std::atomic<bool> gDropped;
inline void releaseDropped() {
  if (gDropped.load(std::memory_order_acquire)) releaseDroppedStates();
}

struct LazyTensorImpl final : c10::TensorImpl {
  // A storage of its own with no memory (data_ptr() refuses): is_alias_of is
  // true for this tensor and its shallow copies only (DDP's reducer asks).
  // Always a normal tensor, with its autograd keys and a version counter,
  // as the VIEW constructor makes it: under torch.inference_mode the plain
  // constructor makes an inference tensor, and ADInplaceOrView then fails to
  // make a view's result share its normal base's version counter ("Cannot
  // set version_counter for inference tensor": every view, so nn.Linear).
  // That constructor adds no keys: the autocast key is named here.
  LazyTensorImpl(caffe2::TypeMeta dtype, PyObject* state)
      : c10::TensorImpl(c10::TensorImpl::VIEW,
                        c10::Storage(c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, c10::Device(kLazy, 0)),
                                     /*allocator=*/nullptr, /*resizable=*/false),
                        c10::DispatchKeySet{c10::DispatchKey::PrivateUse1, c10::DispatchKey::AutogradPrivateUse1,
                                            c10::DispatchKey::ADInplaceOrView, c10::DispatchKey::AutocastPrivateUse1},
                        dtype),
        state_(state) {}

  ~LazyTensorImpl() override { release(); }

  // The state, borrowed: the tensor holds it (the caller holds the GIL).
  PyObject* state() const { return state_; }

  void setState(PyObject* state) {  // steals; GIL held
    PyObject* old = state_;
    state_ = state;
    Py_XDECREF(old);
  }

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(const c10::VariableVersion& version,
                                                              bool allowMetadataChange) const override {
    return copyWith(c10::VariableVersion(version), allowMetadataChange);
  }

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(c10::VariableVersion&& version,
                                                              bool allowMetadataChange) const override {
    return copyWith(std::move(version), allowMetadataChange);
  }

  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override {
    auto* other = dynamic_cast<LazyTensorImpl*>(impl.get());
    TORCH_CHECK(other != nullptr, "lazymlir: a lazy tensor's data can only be set to another lazy tensor");
    copy_tensor_metadata(other, this, version_counter(), allow_tensor_metadata_change());
    py::gil_scoped_acquire gil;
    setState(copyState(other->state_));
    refresh_numel();
    refresh_contiguous();
  }

  // A new tensor with this one's metadata and a copy of its state.
  c10::intrusive_ptr<c10::TensorImpl> copyWith(c10::VariableVersion&& version, bool allowMetadataChange) const {
    PyObject* state;
    {
      py::gil_scoped_acquire gil;
      state = copyState(state_);
    }
    auto impl = c10::make_intrusive<LazyTensorImpl>(dtype(), state);
    copy_tensor_metadata(this, impl.get(), std::move(version), allowMetadataChange);
    impl->refresh_numel();
    impl->refresh_contiguous();
    return impl;
  }

 private:
  static PyObject* copyState(PyObject* state) {
    PyObject* copy = PyObject_CallOneArg(gCopyState, state);
    if (copy == nullptr) throw py::error_already_set();
    return copy;
  }

  // Destroyed on any thread, with or without the GIL (torch drops it to
  // free a tensor): see releaseState.
  void release() {
    if (state_ != nullptr) releaseState(std::exchange(state_, nullptr));
  }

  PyObject* state_;
};

// make(meta, state, dtype): a lazy tensor with meta's sizes, strides, offset
// and conjugate/negative bits holding ``state`` (stolen).
at::Tensor make(const at::Tensor& meta, py::object state, std::optional<at::ScalarType> dtype);

// The OpOverload (torch.ops.<ns>.<name>.<overload>) of an operator; borrowed, kept for ever.
PyObject* opOverload(const c10::OperatorHandle& op);

// An argument as __torch_dispatch__ shows it.
py::object toPython(const c10::Argument& arg, const c10::IValue& value);

bool isDefault(const c10::Argument& formal, const c10::IValue& value);

// The arguments of a call that Python sees (``arguments``: one per formal):
// the positional ones before ``positional`` (the last that differs from its
// default ends them), the keyword-only ones from ``kwargStart`` on that
// differ from their defaults.
struct CallShape {
  size_t positional, kwargStart;
};
CallShape callShape(const c10::FunctionSchema& schema, const c10::IValue* arguments);

// (args, kwargs) of a call, as __torch_dispatch__ gets them.
std::pair<py::tuple, py::dict> toPythonCall(const c10::FunctionSchema& schema, const c10::IValue* arguments);

// The fast path (FastPath.cpp): records the op and returns true, or leaves
// the stack alone and returns false (then tensor.dispatch gets it).
bool tryFast(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// Foreach ops with a plan (Foreach.cpp): the same, as a loop over elements.
bool tryForeach(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void forgetForeach();
void defineForeach(py::module_& m);
void defineFastPath(py::module_& m);
void defineCollect(py::module_& m);  // Collect.cpp: ir.collect
void defineReplay(py::module_& m);   // Replay.cpp: a compiled step run without Python

}  // namespace lazymlir::device
