#include "topology/topology.h"

#include <cstring>

#include "core/proto_enums.h"
#include "core/status.h"
#include "topology.pb-c.h"

namespace tpurt {

namespace {

// num_tasks * devices_per_task * 4 entries follow (the C API's implied length).
constexpr size_t kImpliedLength = SIZE_MAX;

// Checks TensorFlow's mesh rule plus tpurt's size bound; returns the position count.
int64_t mesh_volume(const int32_t* mesh, size_t len) {
  bool ok = len == TPU_MESH_RANK;
  for (size_t a = 0; ok && a < len; ++a) ok = mesh[a] >= 1;
  if (!ok)
    invalid_argument("mesh_shape must be a vector of size 4 with positive entries; got ",
                     format_array(mesh, len));
  int64_t volume = 1;
  for (size_t a = 0; a < len; ++a) {
    volume *= mesh[a];  // at most 2^20 * 2^31: no overflow
    if (volume > kMaxDevices)
      invalid_argument("mesh_shape ", format_array(mesh, len), " has more than ", kMaxDevices,
                       " positions, the most tpurt supports");
  }
  return volume;
}

void append_job(std::string& s, const char* job) {
  if (job == nullptr || *job == '\0') return;
  if (std::strpbrk(job, "/:") != nullptr)
    invalid_argument("job name '", job, "' must not contain '/' or ':'");
  s += "/job:";
  s += job;
}

struct ProtoDeleter {
  void operator()(Tensorflow__Tpu__TopologyProto* p) const {
    tensorflow__tpu__topology_proto__free_unpacked(p, nullptr);
  }
};

std::string encode(const Coords& mesh, int num_tasks, int devices_per_task,
                   const std::vector<int32_t>& coordinates,
                   const std::optional<HardwareFeature>& hw) {
  Tensorflow__Tpu__TopologyProto p = TENSORFLOW__TPU__TOPOLOGY_PROTO__INIT;
  Tensorflow__Tpu__TPUHardwareFeature h = TENSORFLOW__TPU__TPUHARDWARE_FEATURE__INIT;
  p.n_mesh_shape = mesh.size();
  p.mesh_shape = const_cast<int32_t*>(mesh.data());
  p.num_tasks = num_tasks;
  p.num_tpu_devices_per_task = devices_per_task;
  p.n_device_coordinates = coordinates.size();
  p.device_coordinates = const_cast<int32_t*>(coordinates.data());
  if (hw) {
    h.embedding_feature =
        static_cast<Tensorflow__Tpu__TPUHardwareFeature__EmbeddingFeature>(hw->embedding_feature);
    h.num_embedding_devices_per_chip = hw->num_embedding_devices_per_chip;
    p.tpu_hardware_feature = &h;
  }
  std::string out(tensorflow__tpu__topology_proto__get_packed_size(&p), '\0');
  tensorflow__tpu__topology_proto__pack(&p, reinterpret_cast<uint8_t*>(&out[0]));
  return out;
}

}  // namespace

std::string format_coords(const int32_t* c) {
  return str_cat('(', c[0], ", ", c[1], ", ", c[2], ", ", c[3], ')');
}

std::string tpu_device_name(const char* job, int task, int device) {
  std::string s;
  append_job(s, job);
  return s + str_cat("/task:", task, "/device:TPU:", device);
}

std::string host_device_name(const char* job, int task) {
  std::string s;
  append_job(s, job);
  return s + str_cat("/task:", task, "/device:CPU:0");
}

std::string full_device_name(const char* job, int task, const char* device_type, int device) {
  require_not_null(device_type, "device_type");
  if (std::strcmp(device_type, "TPU") != 0 && std::strcmp(device_type, "CPU") != 0)
    invalid_argument("device_type '", device_type, "' must be \"TPU\" or \"CPU\"");
  if (task < 0) fail(TPU_OUT_OF_RANGE, "task ", task, " is negative");
  if (device < 0) fail(TPU_OUT_OF_RANGE, "device ", device, " is negative");
  std::string s;
  append_job(s, job);
  return s + str_cat("/replica:0/task:", task, "/device:", device_type, ':', device);
}

std::string core_device_name(int n) {
  if (n < 0) fail(TPU_OUT_OF_RANGE, "core ", n, " is negative");
  return str_cat("device:TPU_REPLICATED_CORE:", n);
}

struct Topology::Fields {
  const int32_t* mesh = nullptr;
  size_t mesh_len = 0;
  int64_t num_tasks = 0;
  int64_t devices_per_task = 0;
  const int32_t* coords = nullptr;
  size_t coords_len = kImpliedLength;
  std::optional<HardwareFeature> hardware_feature;
  std::optional<std::string> serialized;  // the parsed bytes, kept verbatim
};

// Validates in TensorFlow's order (mesh, counts, length, negatives), then what TF's
// C++ runtime adds (inside the mesh, no duplicates).
std::shared_ptr<const Topology> Topology::make(const Fields& f) {
  const int64_t volume = mesh_volume(f.mesh, f.mesh_len);
  if (f.num_tasks < 0) invalid_argument("num_tasks must be >= 0; got ", f.num_tasks);
  if (f.devices_per_task < 0)
    invalid_argument("num_tpu_devices_per_task must be >= 0; got ", f.devices_per_task);
  const int64_t devices = f.num_tasks * f.devices_per_task;  // < 2^62
  if (devices > kMaxDevices)
    invalid_argument("num_tasks (", f.num_tasks, ") * num_tpu_devices_per_task (",
                     f.devices_per_task, ") = ", devices, " devices; tpurt supports at most ",
                     kMaxDevices);
  const size_t expected = static_cast<size_t>(devices) * TPU_MESH_RANK;
  if (f.coords_len != kImpliedLength && f.coords_len != expected)
    invalid_argument("device_coordinates must have shape num_tasks (", f.num_tasks,
                     ") * num_tpu_devices_per_task (", f.devices_per_task,
                     ") * len(mesh_shape) (4) = ", expected, " entries; got ", f.coords_len);
  if (expected > 0) require_not_null(f.coords, "device_coordinates");

  std::shared_ptr<Topology> t(new Topology());
  std::memcpy(t->mesh_.data(), f.mesh, sizeof(t->mesh_));
  t->num_tasks_ = static_cast<int>(f.num_tasks);
  t->devices_per_task_ = static_cast<int>(f.devices_per_task);
  if (expected > 0) t->coordinates_.assign(f.coords, f.coords + expected);
  t->hardware_feature_ = f.hardware_feature;

  const int d_per_task = t->devices_per_task_;
  auto where = [&](int64_t i) {
    return str_cat("task ", i / d_per_task, " device ", i % d_per_task);
  };
  for (int64_t i = 0; i < devices; ++i) {
    const int32_t* c = &t->coordinates_[i * TPU_MESH_RANK];
    if (c[0] < 0 || c[1] < 0 || c[2] < 0 || c[3] < 0)
      invalid_argument("All values in device_coordinates must be >= 0; got ", format_coords(c),
                       " for ", where(i));
  }
  t->device_at_position_.assign(static_cast<size_t>(volume), -1);
  for (int64_t i = 0; i < devices; ++i) {
    const int32_t* c = &t->coordinates_[i * TPU_MESH_RANK];
    if (!t->in_mesh(c))
      invalid_argument("device coordinate ", format_coords(c), " of ", where(i),
                       " is outside of mesh shape ", format_array(f.mesh, f.mesh_len));
    int32_t& slot = t->device_at_position_[t->position(c)];
    if (slot >= 0)
      invalid_argument(where(i), " has duplicate device coordinate ", format_coords(c), " (",
                       where(slot), " is there already)");
    slot = static_cast<int32_t>(i);
  }
  for (int64_t pos = 0; pos < volume; ++pos)
    if (t->device_at_position_[pos] < 0) t->missing_.push_back(static_cast<int32_t>(pos));

  t->serialized_ = f.serialized ? *f.serialized
                                : encode(t->mesh_, t->num_tasks_, t->devices_per_task_,
                                         t->coordinates_, t->hardware_feature_);
  return t;
}

std::shared_ptr<const Topology> Topology::create(const std::vector<int32_t>& mesh_shape,
                                                 const std::vector<int32_t>& device_coordinates,
                                                 int num_tasks, int devices_per_task,
                                                 std::optional<HardwareFeature> hardware_feature) {
  Fields f;
  f.mesh = mesh_shape.data();
  f.mesh_len = mesh_shape.size();
  f.num_tasks = num_tasks;
  f.devices_per_task = devices_per_task;
  f.coords = device_coordinates.data();
  f.coords_len = device_coordinates.size();
  f.hardware_feature = hardware_feature;
  return make(f);
}

std::shared_ptr<const Topology> Topology::create(const int32_t* mesh_shape, int mesh_rank,
                                                 const int32_t* device_coordinates, int num_tasks,
                                                 int devices_per_task) {
  require_not_null(mesh_shape, "mesh_shape");
  if (mesh_rank != TPU_MESH_RANK)
    invalid_argument("mesh_rank is ", mesh_rank,
                     "; mesh_shape must be a vector of size 4 with positive entries");
  Fields f;
  f.mesh = mesh_shape;
  f.mesh_len = TPU_MESH_RANK;
  f.num_tasks = num_tasks;
  f.devices_per_task = devices_per_task;
  f.coords = device_coordinates;
  return make(f);
}

std::shared_ptr<const Topology> Topology::parse(const void* bytes, size_t len) {
  if (bytes == nullptr && len != 0) invalid_argument("argument 'bytes' is NULL but len is ", len);
  static const uint8_t kEmpty = 0;
  const uint8_t* data = len ? static_cast<const uint8_t*>(bytes) : &kEmpty;
  std::unique_ptr<Tensorflow__Tpu__TopologyProto, ProtoDeleter> p(
      tensorflow__tpu__topology_proto__unpack(nullptr, len, data));
  if (!p)
    invalid_argument("bytes are not a serialized tensorflow.tpu.TopologyProto (", len, " bytes)");
  check_proto_enums(&p->base);
  Fields f;
  f.mesh = p->mesh_shape;
  f.mesh_len = p->n_mesh_shape;
  f.num_tasks = p->num_tasks;
  f.devices_per_task = p->num_tpu_devices_per_task;
  f.coords = p->device_coordinates;
  f.coords_len = p->n_device_coordinates;
  if (p->tpu_hardware_feature != nullptr)
    f.hardware_feature = HardwareFeature{proto_enum_value(p->tpu_hardware_feature->embedding_feature),
                                         p->tpu_hardware_feature->num_embedding_devices_per_chip};
  f.serialized.emplace(reinterpret_cast<const char*>(data), len);
  return make(f);
}

std::shared_ptr<const Topology> Topology::local(const int32_t mesh[TPU_MESH_RANK], int num_cores) {
  require_not_null(mesh, "mesh_shape");
  const int64_t volume = mesh_volume(mesh, TPU_MESH_RANK);
  if (volume != num_cores)
    invalid_argument("mesh_shape ", format_array(mesh, TPU_MESH_RANK), " has ", volume,
                     " cores but num_cores is ", num_cores);
  std::vector<int32_t> coords(static_cast<size_t>(volume) * TPU_MESH_RANK);
  const int32_t X = mesh[0], Y = mesh[1], C = mesh[3];
  for (int32_t i = 0; i < num_cores; ++i) {
    int32_t* c = &coords[static_cast<size_t>(i) * TPU_MESH_RANK];
    c[3] = i % C;
    c[0] = (i / C) % X;
    c[1] = (i / C / X) % Y;
    c[2] = i / C / X / Y;
  }
  Fields f;
  f.mesh = mesh;
  f.mesh_len = TPU_MESH_RANK;
  f.num_tasks = 1;
  f.devices_per_task = num_cores;
  f.coords = coords.data();
  f.coords_len = coords.size();
  return make(f);
}

Coords Topology::device_coordinates(int task, int device) const {
  if (task < 0 || task >= num_tasks_)
    fail(TPU_OUT_OF_RANGE, "task ", task, " is outside [0, ", num_tasks_, ")");
  if (device < 0 || device >= devices_per_task_)
    fail(TPU_OUT_OF_RANGE, "device ", device, " is outside [0, ", devices_per_task_, ")");
  Coords c;
  const size_t i = (static_cast<size_t>(task) * devices_per_task_ + device) * TPU_MESH_RANK;
  std::memcpy(c.data(), &coordinates_[i], sizeof(c));
  return c;
}

bool Topology::in_mesh(const int32_t* coords) const {
  for (int a = 0; a < TPU_MESH_RANK; ++a)
    if (coords[a] < 0 || coords[a] >= mesh_[a]) return false;
  return true;
}

int64_t Topology::position(const int32_t* coords) const {
  if (!in_mesh(coords))
    invalid_argument("coordinates ", format_coords(coords), " are outside of mesh shape ",
                     format_array(mesh_.data(), mesh_.size()));
  int64_t pos = 0;
  for (int a = 0; a < TPU_MESH_RANK; ++a) pos = pos * mesh_[a] + coords[a];
  return pos;
}

Coords Topology::coords_of_position(int64_t pos) const {
  Coords c;
  for (int a = TPU_MESH_RANK - 1; a >= 0; --a) {
    c[a] = static_cast<int32_t>(pos % mesh_[a]);
    pos /= mesh_[a];
  }
  return c;
}

int Topology::flat_device_at(const int32_t* coords) const {
  return device_at_position_[position(coords)];
}

int Topology::require_device_at(const int32_t* coords) const {
  const int d = flat_device_at(coords);
  if (d < 0)
    fail(TPU_NOT_FOUND, "no TPU device at coordinates ", format_coords(coords),
         " (a missing device)");
  return d;
}

Coords Topology::missing_device(int index) const {
  if (index < 0 || index >= num_missing_devices())
    fail(TPU_OUT_OF_RANGE, "missing device index ", index, " is outside [0, ",
         num_missing_devices(), ")");
  return coords_of_position(missing_[index]);
}

std::string Topology::tpu_device_name(const int32_t* coords, const char* job) const {
  return tpurt::tpu_device_name(job, task_at(coords), device_at(coords));
}

std::string Topology::cpu_device_name(const int32_t* coords, const char* job) const {
  return host_device_name(job, task_at(coords));
}

std::string Topology::describe() const {
  return str_cat("mesh [", mesh_[0], ", ", mesh_[1], ", ", mesh_[2], ", ", mesh_[3], "], ",
                 num_tasks_, num_tasks_ == 1 ? " task" : " tasks", " of ", devices_per_task_,
                 " devices");
}

}  // namespace tpurt
