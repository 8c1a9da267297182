#include "metalrt/device.h"

#include <mutex>
#include <stdexcept>

#include "metalrt/op_registry.h"

namespace metalrt {

const char* DeviceTypeName(DeviceType type) {
  return type == DeviceType::kCPU ? "cpu" : "metal";
}

DeviceType DeviceTypeFromName(const std::string& name) {
  if (name == "cpu") return DeviceType::kCPU;
  if (name == "metal") return DeviceType::kMETAL;
  throw std::invalid_argument("unknown device '" + name + "'; expected 'cpu' or 'metal'");
}

std::unique_ptr<Queue> Backend::CreateQueue() { return std::make_unique<Queue>(); }
void Backend::DestroyQueue(std::unique_ptr<Queue> queue) { queue.reset(); }

std::shared_ptr<void> Backend::AdoptExternal(void*, size_t, std::shared_ptr<void> keep_alive) {
  if (type() == DeviceType::kCPU) return keep_alive;
  throw std::invalid_argument("[external memory] " + name() + " cannot use host memory without a copy");
}

void Backend::BeginCapture() {
  throw std::runtime_error(name() + " does not support graph capture");
}
void Backend::EndCapture() {
  throw std::runtime_error(name() + " does not support graph capture");
}

std::unique_ptr<EncodedOp> Backend::EndOpCapture() { return nullptr; }

namespace {
struct BackendSlot {
  BackendFactory factory = nullptr;
  std::unique_ptr<Backend> instance;
};
std::mutex& RegistryMutex() { static std::mutex m; return m; }
BackendSlot& Slot(DeviceType type) {
  static BackendSlot slots[2];
  return slots[static_cast<int>(type)];
}
}  // namespace

void RegisterBackend(DeviceType type, BackendFactory factory) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Slot(type).factory = factory;
}

bool HasBackend(DeviceType type) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  return Slot(type).factory != nullptr;
}

Backend& GetBackend(DeviceType type) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  BackendSlot& slot = Slot(type);
  if (!slot.instance) {
    if (!slot.factory)
      throw std::runtime_error(std::string("no backend registered for device '") +
                               DeviceTypeName(type) + "'");
    slot.instance = slot.factory();
  }
  return *slot.instance;
}

}  // namespace metalrt
