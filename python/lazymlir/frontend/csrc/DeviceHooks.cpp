// What PyTorch asks of a PrivateUse1 backend before it lets autograd, device
// guards and generators near its tensors: the device guard (one device,
// index 0; streams and events that do nothing, because a lazy tensor's work
// is ordered by its trace, not by streams) and the PrivateUse1 hooks.
//
// Registered when the module is loaded (static initializers), before any
// lazy tensor exists. Knows nothing of MLIR (docs/DESIGN.md, decision 2):
// synchronizing the device (torch.accelerator.synchronize, a stream's or an
// event's synchronize) calls back into Python (set_synchronize: the device
// module's synchronize, which waits for the graphs in flight).

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <c10/core/CPUAllocator.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/utils/pybind.h>

#include <thread>

namespace lazymlir::device {

namespace py = pybind11;

namespace {

constexpr c10::DeviceType kLazy = c10::DeviceType::PrivateUse1;

c10::Device lazyDevice() { return c10::Device(kLazy, 0); }

void checkIndex(c10::DeviceIndex index) {
  TORCH_CHECK(index == 0 || index == -1, "lazymlir has a single lazy device, index 0 (got ", int(index), ")");
}

// lazymlir.frontend.device_module.synchronize (set_synchronize); kept for ever.
PyObject* gSynchronize = nullptr;

// Waits for the graphs in flight; raises the error of a failed one. Called
// with or without the GIL (torch.accelerator.synchronize releases it).
void synchronize() {
  if (!Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  if (gSynchronize == nullptr) return;  // the tracer is not loaded: no graph was ever started
  PyObject* out = PyObject_CallNoArgs(gSynchronize);
  if (out == nullptr) throw py::error_already_set();
  Py_DECREF(out);
}

// Events carry no state: every event is recorded the moment it is asked to be
// and complete, which is true of a device whose work runs in trace order.
struct LazyGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kLazy; }
  c10::Device exchangeDevice(c10::Device d) const override {
    checkIndex(d.index());
    return lazyDevice();
  }
  c10::Device getDevice() const override { return lazyDevice(); }
  void setDevice(c10::Device d) const override { checkIndex(d.index()); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const override { return c10::Stream(c10::Stream::DEFAULT, lazyDevice()); }
  c10::Stream getDefaultStream(c10::Device) const override { return c10::Stream(c10::Stream::DEFAULT, lazyDevice()); }
  c10::Stream getNewStream(c10::Device, int) const override { return c10::Stream(c10::Stream::DEFAULT, lazyDevice()); }
  c10::Stream getStreamFromGlobalPool(c10::Device, bool) const override {
    return c10::Stream(c10::Stream::DEFAULT, lazyDevice());
  }
  c10::Stream exchangeStream(c10::Stream) const override { return c10::Stream(c10::Stream::DEFAULT, lazyDevice()); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  // The device's one stream is its graphs in trace order: synchronizing the
  // stream, an event recorded on it or the device waits for all of them.
  void synchronizeStream(const c10::Stream&) const override { synchronize(); }
  void synchronizeEvent(void*) const override { synchronize(); }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    checkIndex(index);
    synchronize();
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void*, void*, const c10::DeviceIndex) const override { return 0.0; }
};

// The lazy device draws random numbers from the CPU generator (RNG ops run
// eagerly on the CPU: the same stream of numbers as eager PyTorch).
struct LazyHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    checkIndex(index);
    return true;
  }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  void setCurrentDevice(c10::DeviceIndex index) const override { checkIndex(index); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    checkIndex(index);
    return 0;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    checkIndex(index);
    return 0;
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    checkIndex(index);
    return at::detail::getDefaultCPUGenerator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    checkIndex(index);
    return at::detail::createCPUGenerator();
  }
  // Lazy tensors have no device memory of their own: a data pointer is a CPU one.
  c10::Device getDeviceFromPtr(void*) const override { return lazyDevice(); }
  bool isPinnedPtr(const void*) const override { return false; }
  at::Allocator* getPinnedMemoryAllocator() const override { return at::getCPUAllocator(); }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, LazyGuardImpl);

struct RegisterHooks {
  RegisterHooks() {
    static LazyHooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
} registerHooks;

// The autograd engine makes its device threads' queues once, at its first
// backward, one per index of the largest device count among the device
// guards registered then. A backward run before lazymlir._device was loaded
// (torch imported with TORCH_DEVICE_BACKEND_AUTOLOAD=0, or without the entry
// point installed, and lazymlir imported after it) leaves it no queue for
// lazy:0 on a machine without another accelerator, and every backward on
// the lazy device then fails an internal assert in Engine::ready_queue. The
// engine keeps those queues in a protected member; this gives it the queue
// and the thread its start_device_threads would have made. Only when the
// engine has started (its reentrant pool exists) with no device queue at all:
// nothing read the empty vector (CPU work never does), so the assignment
// races with no reader. A backward started on another thread while lazymlir
// is imported could still start the engine concurrently: not handled.
struct EngineQueues : torch::autograd::Engine {
  static auto queues() { return &EngineQueues::device_ready_queues_; }
  static auto pool() { return &EngineQueues::thread_pool_shared_; }
};

bool addAutogradDeviceQueue() {
  auto& engine = torch::autograd::Engine::get_default_engine();
  auto& queues = engine.*EngineQueues::queues();
  if (engine.*EngineQueues::pool() == nullptr || !queues.empty()) return false;  // not started, or lazy:0 has one
  queues = {std::make_shared<torch::autograd::ReadyQueue>()};
  std::thread thread(&torch::autograd::Engine::thread_init, &engine, 0, queues[0], true);
  thread.detach();
  return true;
}

// Whether the engine has started its device threads (at its first backward of
// any device): lazy:0's thread then exists.
bool autogradDeviceThreadStarted() {
  auto& engine = torch::autograd::Engine::get_default_engine();
  return engine.*EngineQueues::pool() != nullptr && !(engine.*EngineQueues::queues()).empty();
}

}  // namespace

void defineDeviceHooks(py::module_& m) {
  m.def(
      "set_synchronize", [](py::object fn) { Py_XSETREF(gSynchronize, fn.release().ptr()); }, py::arg("fn"),
      "The callable that waits for the graphs in flight (the device guard's synchronize calls it)");
  m.def("autograd_device_thread_started", &autogradDeviceThreadStarted,
        "Whether the autograd engine has started its device threads (lazy:0's among them)");
  m.def("add_autograd_device_queue", &addAutogradDeviceQueue,
        "Gives an autograd engine started before the lazy device existed the device queue lazy:0 needs; True when "
        "it had none");
}

}  // namespace lazymlir::device
