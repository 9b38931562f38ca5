// TopologyProto bytes under libFuzzer (tests/fuzz/fuzz.mk): Topology::parse, as
// tpu_topology_parse calls it; what parses must be usable (fuzz_topology_use.h),
// and build a device assignment of every device (TensorFlow's default).
#include <cstdint>

#include "fuzz_topology_use.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const tpurt::Topology> t;
  try {
    t = tpurt::Topology::parse(data, size);
  } catch (const tpurt::Error&) {
    return 0;
  }
  if (t->serialize() != std::string(reinterpret_cast<const char*>(data), size)) std::abort();
  fuzz::use(t);
  try {
    fuzz::use(tpurt::DeviceAssignment::build(t, nullptr, 0, nullptr, 0, t->num_devices()));
  } catch (const tpurt::Error&) {
  }
  try {
    fuzz::use(tpurt::DeviceAssignment::in_device_order(t, t->num_devices()));
  } catch (const tpurt::Error&) {
    std::abort();  // every topology has its devices in order
  }
  return 0;
}
