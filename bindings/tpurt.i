/* The one SWIG interface for the whole tpurt C ABI, through the binding-support
 * classes of tpurt_binding.hpp (one header per concern in support/). Language-neutral:
 * any SWIG language with std_string, std_vector and directors can generate a binding
 * from it (the tests do so for Python). The per-language files (csharp/tpurt_csharp.i,
 * java/tpurt_java.i, go/tpurt_go.i) include it after their typemaps and renames. */
#ifndef TPURT_MODULE_DECLARED
%module(directors="1") tpurt
#endif

%{
#include "tpurt_binding.hpp"
%}

%include <stdint.i>
%include <std_string.i>
%include <std_vector.i>
%include <exception.i>

/* 64-bit sizes stay 64-bit in every language: int64_t is long in C#/Java, int64 in Go. */
%template(Int32Vector) std::vector<int32_t>;
%template(Int64Vector) std::vector<long long>;
%template(FloatVector) std::vector<float>;
%template(DoubleVector) std::vector<double>;
%template(ByteVector) std::vector<uint8_t>;
%template(UInt16Vector) std::vector<uint16_t>;
%template(StringVector) std::vector<std::string>;
%template(Int32VectorVector) std::vector<std::vector<int32_t>>;

/* A failing call raises the language's error with the status code and message, read
 * in this same wrapper call. A language defines TPURT_RAISE(code, message) before
 * including this file to raise its own typed errors; the fallback is SWIG's portable
 * runtime error with "STATUS_NAME: message". */
#ifndef TPURT_RAISE_DEFINED
%{
#define TPURT_RAISE(code, message) \
  SWIG_exception(SWIG_RuntimeError, (tpurt::statusName(static_cast<tpurt::Status>(code)) + ": " + (message)).c_str())
%}
#endif

%exception {
  try {
    $action
  } catch (const tpurt::Error& e) {
    TPURT_RAISE(e.code(), e.message());
  } catch (const std::exception& e) {
    TPURT_RAISE(13 /* INTERNAL */, std::string(e.what()));
  }
}

/* Callbacks from worker threads: directors that return a tpu_status. */
%feature("director") tpurt::Computation;
%feature("director") tpurt::HostComputation;
%feature("director") tpurt::HostTensorComputation;
/* A language layer catches its own exception or panic inside run() and returns
 * ctx.fail(code, message): nothing managed unwinds through the C frames. */

#ifdef SWIGPYTHON
/* Python has no hand layer: an exception raised in run() becomes a tpurt::Error with
 * "Type: message", which the trampolines pass to tpu_replica_context_fail (or the host
 * error), instead of SWIG's bare "director method error". Runs with the GIL held. */
%{
static std::string tpurt_python_error() {
  PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
  PyErr_Fetch(&type, &value, &trace);
  PyErr_NormalizeException(&type, &value, &trace);
  PyObject* module = type ? PyObject_GetAttrString(type, "__module__") : nullptr;
  PyObject* name = type ? PyObject_GetAttrString(type, "__qualname__") : nullptr;
  PyObject* message = value ? PyObject_Str(value) : nullptr;
  auto utf8 = [](PyObject* o) {
    const char* s = o && PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : nullptr;
    return std::string(s ? s : "");
  };
  std::string text = utf8(name).empty() ? "a Python exception" : utf8(name);
  if (!utf8(module).empty() && utf8(module) != "builtins") text = utf8(module) + "." + text;
  if (!utf8(message).empty()) text += ": " + utf8(message);
  PyErr_Clear();  // a failed lookup above must not leak into the caller's next call
  for (PyObject* o : {module, name, message, type, value, trace}) Py_XDECREF(o);
  return text;
}
%}
%feature("director:except") {
  if ($error != nullptr) throw tpurt::Error(TPU_UNKNOWN, tpurt_python_error());
}
#endif

/* Internal plumbing the languages do not need. */
%ignore tpurt::Error;
%ignore tpurt::Tensor::Tensor(tpu_tensor*);
%ignore tpurt::Tensor::Tensor(Tensor&&);
%ignore tpurt::Tensor::operator=;
%ignore tpurt::Tensor::handle;
%ignore tpurt::Tensor::handleOrNull;
%ignore tpurt::Topology::Topology(tpu_topology*);
%ignore tpurt::Topology::handle;
%ignore tpurt::DeviceAssignment::DeviceAssignment(tpu_device_assignment*);
%ignore tpurt::DeviceAssignment::handle;
%ignore tpurt::Mesh::Mesh(tpu_mesh*);
%ignore tpurt::Mesh::handle;
%ignore tpurt::Shape::toC;
%ignore tpurt::GroupAssignment::get;
%ignore tpurt::SystemOptions::toC;
%ignore tpurt::StepOptions::toC;
%ignore tpurt::CollectiveOptions::toC;
%ignore tpurt::InfeedQueue::handle;
%ignore tpurt::OutfeedQueue::handle;
%ignore tpurt::HostComputation::trampoline;
%ignore tpurt::Computation::trampoline;
%ignore tpurt::ReplicaContext::ReplicaContext;
%ignore tpurt::TpuSystem::handle;
%ignore tpurt::ClusterResolver::handle;
%ignore tpurt::ClusterResolverOptions::toC;
%ignore tpurt::ClusterOptions::toC;

/* Factories that return new objects hand ownership to the language. */
%newobject tpurt::Topology::create;
%newobject tpurt::Topology::parse;
%newobject tpurt::DeviceAssignment::build;
%newobject tpurt::DeviceAssignment::create;
%newobject tpurt::DeviceAssignment::topology;
%newobject tpurt::Mesh::create;
%newobject tpurt::Mesh::createFromTopology;
%newobject tpurt::Mesh::deviceAssignment;
%newobject tpurt::TpuSystem::initializeSystem;
%newobject tpurt::TpuSystem::topology;
%newobject tpurt::TpuSystem::stepJoin;
%newobject tpurt::TpuSystem::defaultDeviceAssignment;
%newobject tpurt::TpuSystem::initializeTpuSystem;
%newobject tpurt::TpuSystem::initializeAcceleratorSystem;
%newobject tpurt::TpuSystem::initializeMultiClient;

/* SWIG does not follow #include: the support headers, in tpurt_binding.hpp's order. */
%include "support/common.hpp"
%include "support/tensor.hpp"
%include "support/topology.hpp"
%include "support/mesh.hpp"
%include "support/options.hpp"
%include "support/cluster.hpp"
%include "support/feed.hpp"
%include "support/embedding.hpp"
%include "support/context.hpp"
%include "support/step.hpp"
%include "support/system.hpp"
%include "support/checkpoint.hpp"

%template(TensorVector) std::vector<tpurt::Tensor>;
%template(ShapeVector) std::vector<tpurt::Shape>;
%template(EmbeddingFeatureBatchVector) std::vector<tpurt::EmbeddingFeatureBatch>;
