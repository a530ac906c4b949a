// What PyTorch asks of a PrivateUse1 backend before it lets autograd, device
// guards and generators near its tensors: the device guard (one device,
// index 0; streams and events that do nothing, because a lazy tensor's work
// is ordered by its trace, not by streams) and the PrivateUse1 hooks.
//
// Registered when the module is loaded (static initializers), before any
// lazy tensor exists. Knows nothing of MLIR (docs/DESIGN.md, decision 2).

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <c10/core/CPUAllocator.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace lazymlir::device {
namespace {

constexpr c10::DeviceType kLazy = c10::DeviceType::PrivateUse1;

c10::Device lazyDevice() { return c10::Device(kLazy, 0); }

void checkIndex(c10::DeviceIndex index) {
  TORCH_CHECK(index == 0 || index == -1, "lazymlir has a single lazy device, index 0 (got ", int(index), ")");
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
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
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

}  // namespace
}  // namespace lazymlir::device
