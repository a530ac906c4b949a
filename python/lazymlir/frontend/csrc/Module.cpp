// lazymlir._device: the lazy device's C++ (links libtorch, knows nothing of
// MLIR). Loading it registers the device guard, the PrivateUse1 hooks and the
// autocast kernels (static initializers in DeviceHooks.cpp and Autocast.cpp);
// the Python side (lazymlir.frontend) renames PrivateUse1 to "lazy" first.

#include <torch/extension.h>

namespace lazymlir::device {
void defineTensor(pybind11::module_& m);
void definePooledBuffers(pybind11::module_& m);
void defineDeviceHooks(pybind11::module_& m);
}  // namespace lazymlir::device

PYBIND11_MODULE(_device, m) {
  m.doc() = "lazymlir's lazy device (C++ on PyTorch's PrivateUse1 key); private";
  lazymlir::device::defineTensor(m);
  lazymlir::device::definePooledBuffers(m);
  lazymlir::device::defineDeviceHooks(m);
}
