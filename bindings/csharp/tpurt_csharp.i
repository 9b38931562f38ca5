/* C# binding of tpurt: typemaps and renames over the one interface (../tpurt.i).
 * The idiomatic API (static class tpu, typed exceptions, delegates) is hand-written
 * in the *.cs files beside this one. */
%module(directors="1") TpurtNative
#define TPURT_MODULE_DECLARED

/* Typed errors: the wrapper hands (code, message) to a C# delegate registered at
 * start-up (TpurtExceptionHelper), which sets SWIG's pending exception; the proxy
 * throws it when the native call returns. */
#define TPURT_RAISE_DEFINED
%insert(runtime) %{
typedef void (SWIGSTDCALL* TpurtCSharpRaiseCallback)(int code, const char* message);
static TpurtCSharpRaiseCallback tpurt_csharp_raise_callback = 0;
#ifdef __cplusplus
extern "C"
#endif
SWIGEXPORT void SWIGSTDCALL TpurtRegisterRaiseCallback(TpurtCSharpRaiseCallback callback) {
  tpurt_csharp_raise_callback = callback;
}
%}
%{
#define TPURT_RAISE(code, message) tpurt_csharp_raise_callback((code), std::string(message).c_str())
%}
%pragma(csharp) imclasscode=%{
  internal class TpurtExceptionHelper {
    [global::System.Runtime.InteropServices.UnmanagedFunctionPointer(global::System.Runtime.InteropServices.CallingConvention.Cdecl)]
    public delegate void RaiseDelegate(int code, [global::System.Runtime.InteropServices.MarshalAs(global::System.Runtime.InteropServices.UnmanagedType.LPStr)] string message);
    static readonly RaiseDelegate raise = Raise;

    [global::System.Runtime.InteropServices.DllImport("$dllimport", EntryPoint="TpurtRegisterRaiseCallback")]
    static extern void TpurtRegisterRaiseCallback(RaiseDelegate callback);

    // code Disposed: a call through a disposed proxy; message is the wrapper's
    // symbol ("Class_Method"), whose class part names the type.
    internal const int Disposed = -1;
    static void Raise(int code, string message) {
      if (code == Disposed) {
        string symbol = message.StartsWith("delete_") ? message.Substring(7) : message;
        int end = symbol.IndexOf('_');
        SWIGPendingException.Set(new global::System.ObjectDisposedException(end < 0 ? symbol : symbol.Substring(0, end)));
        return;
      }
      SWIGPendingException.Set(OpError.FromCode((Status)code, message));
    }

    static TpurtExceptionHelper() {
      TpurtRegisterRaiseCallback(raise);
    }
  }
  static readonly TpurtExceptionHelper tpurtExceptionHelper = new TpurtExceptionHelper();
%}

%include <arrays_csharp.i>

/* Bulk array copies pin the managed array in place (no marshalling copy); the
 * element count stays 64-bit. The hand layer passes array.Length. */
%apply float FIXED[] { const float* data, float* out }
%apply double FIXED[] { const double* data, double* out }
%apply int FIXED[] { const int32_t* data, int32_t* out }
%apply long long FIXED[] { const long long* data, long long* out }
%apply long long { size_t count }
/* wrapFloat32 borrows its memory beyond the call, and FIXED pins only during it (the
 * GC may move the array afterwards): it takes memory the caller keeps alive and
 * unmoved, e.g. Marshal.AllocHGlobal or a pinned GCHandle. */
%typemap(ctype) float* data "float*"
%typemap(imtype) float* data "global::System.IntPtr"
%typemap(cstype) float* data "global::System.IntPtr"
%typemap(csin) float* data "$csinput"
%typemap(in) float* data "$1 = $input;"
/* These take the count apart from the array, so they stay internal: the public
 * methods of the same names (Tensors.cs) check the count against the array first. */
%define TPURT_UNCHECKED(METHOD, CSNAME)
%rename(CSNAME ## Unchecked) tpurt::Tensor::METHOD;
%csmethodmodifiers tpurt::Tensor::METHOD "internal unsafe";
%enddef
TPURT_UNCHECKED(fromFloat32, FromFloat32)
TPURT_UNCHECKED(fromFloat64, FromFloat64)
TPURT_UNCHECKED(fromInt32, FromInt32)
TPURT_UNCHECKED(fromInt64, FromInt64)
TPURT_UNCHECKED(readFloat32, ReadFloat32)
TPURT_UNCHECKED(readFloat64, ReadFloat64)
TPURT_UNCHECKED(readInt32, ReadInt32)
TPURT_UNCHECKED(readInt64, ReadInt64)
TPURT_UNCHECKED(writeFloat32, WriteFloat32)
TPURT_UNCHECKED(writeFloat64, WriteFloat64)
TPURT_UNCHECKED(writeInt32, WriteInt32)
TPURT_UNCHECKED(writeInt64, WriteInt64)

/* C# names: PascalCase methods and properties of the tpurt classes only (the
 * std::vector proxies' own code calls their lower-case members). */
%rename("%(regex:/^tpurt::(.*::)?(\\w+)$/\\u\\2/)s", regextarget=1, fullname=1, %$isfunction) "^tpurt::";
%rename("%(regex:/^tpurt::(.*::)?(\\w+)$/\\u\\2/)s", regextarget=1, fullname=1, %$isvariable) "^tpurt::";
/* SWIG proxies already have Dispose(): the C++ dispose/close become Release/Close. */
%rename(Release) tpurt::Tensor::dispose;
/* A method named Topology would hide the Topology type inside these classes. */
%rename(GetTopology) tpurt::TpuSystem::topology;
%rename(GetTopology) tpurt::DeviceAssignment::topology;
%rename(GetDeviceAssignment) tpurt::Mesh::deviceAssignment;
/* ReplicaContext.LogicalCore is a property (ModelParallel.cs); the method is its getter.
 * ReplicaId() is ModelParallel.cs's too: on the pool both come with the join (a
 * P/Invoke each, per replica and step, cost an empty step about 2 us on Mono). */
%rename(GetLogicalCore) tpurt::ReplicaContext::logicalCore;
%csmethodmodifiers tpurt::ReplicaContext::logicalCore "internal";
%rename(GetReplicaId) tpurt::ReplicaContext::replicaId;
%csmethodmodifiers tpurt::ReplicaContext::replicaId "internal";
/* The struct owns the name; the accessor by index reads "environment variable at". */
%rename(EnvironmentVariableAt) tpurt::environmentVariable;
/* The director the hand layer subclasses; its native name stays free for tpu's. */
%rename(NativeComputation) tpurt::Computation;
%rename(NativeHostComputation) tpurt::HostComputation;
%rename(NativeHostTensorComputation) tpurt::HostTensorComputation;

/* Close (Lifetime.cs) ends the replica pool before the native close. */
%rename(CloseNative) tpurt::TpuSystem::close;
%csmethodmodifiers tpurt::TpuSystem::close "internal";
/* A JoinedStep comes from TpuSystem.StepJoin only (the pool uses the glue at the end). */
%ignore tpurt::JoinedStep::JoinedStep;

/* The proxies are partial so the hand layer can add IDisposable-friendly helpers. */
%typemap(csclassmodifiers) tpurt::Tensor "public partial class"
%typemap(csclassmodifiers) tpurt::TpuSystem "public partial class"
%typemap(csclassmodifiers) tpurt::Shape "public partial class"
%typemap(csclassmodifiers) tpurt::ClusterResolver "public partial class"
%typemap(csclassmodifiers) tpurt::ReplicaContext "public partial class"
%typemap(csclassmodifiers) tpurt::Mesh "public partial class"

/* A disposed handle is an ObjectDisposedException naming its type, wherever it goes:
 * as `this` (the proxy passes a null pointer, caught here) and as an argument
 * (getCPtr, where every proxy becomes a native pointer, throws: null there would mean
 * "none", e.g. no DeviceAssignment, and the call would run as if none was given). */
%typemap(check, canthrow=1) SWIGTYPE* self %{
  if (!$1) {
    tpurt_csharp_raise_callback(-1 /* TpurtExceptionHelper.Disposed */, "$symname");
    return $null;
  }
%}
%typemap(csbody) SWIGTYPE %{
  private global::System.Runtime.InteropServices.HandleRef swigCPtr;
  protected bool swigCMemOwn;

  internal $csclassname(global::System.IntPtr cPtr, bool cMemoryOwn) {
    swigCMemOwn = cMemoryOwn;
    swigCPtr = new global::System.Runtime.InteropServices.HandleRef(this, cPtr);
  }

  internal static global::System.Runtime.InteropServices.HandleRef getCPtr($csclassname obj) {
    if (obj == null) return new global::System.Runtime.InteropServices.HandleRef(null, global::System.IntPtr.Zero);
    if (obj.swigCPtr.Handle == global::System.IntPtr.Zero) throw new global::System.ObjectDisposedException("$csclassname");
    return obj.swigCPtr;
  }

  internal static global::System.Runtime.InteropServices.HandleRef swigRelease($csclassname obj) {
    if (obj != null) {
      if (!obj.swigCMemOwn)
        throw new global::System.ApplicationException("Cannot release ownership as memory is not owned");
      global::System.Runtime.InteropServices.HandleRef ptr = getCPtr(obj);
      obj.swigCMemOwn = false;
      obj.Dispose();
      return ptr;
    } else {
      return new global::System.Runtime.InteropServices.HandleRef(null, global::System.IntPtr.Zero);
    }
  }
%}

/* Every step (the methods taking the computation) is counted on its system: the
 * exit-time dispose waits only a bounded time for running steps, and the finalizer
 * pump runs while any step does (Lifetime.cs, FinalizerPump.cs). */
%typemap(csin, pre="    StepStarted();", post="      StepEnded();") tpurt::Computation& computation "$csclassname.getCPtr($csinput)"

/* TensorVector's indexer returns a new reference (a retained copy), not a view into
 * the vector: the vector may be collected while the tensor is still used. */
%typemap(out) const tpurt::Tensor& %{ $result = new tpurt::Tensor(*$1); %}
%typemap(csout, excode=SWIGEXCODE) const tpurt::Tensor& {
    Tensor ret = new Tensor($imcall, true);$excode
    return ret;
  }

/* Live systems are tracked so ProcessExit can dispose the ones never disposed (Mono
 * otherwise hangs at exit waiting for their worker threads); Dispose also drops the
 * computations kept alive for late replicas of a failed step, and first ends the
 * replica pool (ReplicaPool.cs), whose threads must leave tpu_step_join before release. */
%typemap(csconstruct, excode=SWIGEXCODE) tpurt::TpuSystem %{: this($imcall, true) {$excode
    SystemRegistry.Track(this);
  }%}
%typemap(csout, excode=SWIGEXCODE) tpurt::TpuSystem* initializeSystem, tpurt::TpuSystem* initializeTpuSystem,
    tpurt::TpuSystem* initializeAcceleratorSystem, tpurt::TpuSystem* initializeMultiClient {
    global::System.IntPtr cPtr = $imcall;$excode
    TpuSystem system = new TpuSystem(cPtr, true);
    SystemRegistry.Track(system);
    return system;
  }
%typemap(csdisposing, methodname="Dispose", methodmodifiers="protected", parameters="bool disposing") tpurt::TpuSystem {
    lock(this) {
      if (swigCPtr.Handle != global::System.IntPtr.Zero) {
        if (swigCMemOwn) {
          swigCMemOwn = false;
          StopPool();
          $imcall;
        }
        swigCPtr = new global::System.Runtime.InteropServices.HandleRef(null, global::System.IntPtr.Zero);
      }
      OnDisposed();
    }
  }

/* float[] forms of embedding load/retrieve for Embedding.cs: the managed array is
 * pinned (FIXED above), not copied element by element through a FloatVector (a
 * 100000 x 64 table took 1.7 s to load and 5.9 s to retrieve that way). */
%csmethodmodifiers tpurt::TpuSystem::embeddingLoadFloats "internal unsafe";
%csmethodmodifiers tpurt::TpuSystem::embeddingRetrieveFloats "internal unsafe";
/* The support layer's retrieve into an array (Go's); C# uses embeddingRetrieveFloats. */
%csmethodmodifiers tpurt::TpuSystem::embeddingRetrieveInto "internal unsafe";

/* The same for a step's ids (EmbeddingInput): pinned arrays into the batch's vectors. */
%csmethodmodifiers tpurt::EmbeddingFeatureBatch::assignIds "internal unsafe";
%csmethodmodifiers tpurt::EmbeddingFeatureBatch::assignSampleIndices "internal unsafe";
%csmethodmodifiers tpurt::EmbeddingFeatureBatch::assignRowSplits "internal unsafe";
%csmethodmodifiers tpurt::EmbeddingFeatureBatch::assignWeights "internal unsafe";

%include "../tpurt.i"

/* After the interface, so that its %exception covers them (declared above: the modifiers). */
/* embeddingLoadFloats and EmbeddingFeatureBatch::assign* are the support layer's. */
%extend tpurt::TpuSystem {
  /* Fills the rows held here; returns the count the rows need (null out, count 0: a size query). */
  long long embeddingRetrieveFloats(int table, int variable, int64_t firstRow, int64_t numRows, float* out, size_t count) {
    size_t n = 0;
    tpurt::detail::check(tpu_embedding_retrieve($self->handle(), table, variable, firstRow, numRows, out, count, &n));
    return static_cast<long long>(n);
  }
}


/* The replica pool's hot path (ReplicaPool.cs), called by hand-written P/Invoke into
 * the one replica pool (../replica_pool.hpp): one call leaves a core's participant and
 * joins for the next, pointing the seat's reused tpurt::ReplicaContext at it. A SWIG
 * proxy per step would allocate a native object and finalizable proxies per replica. */
%{
#include "replica_pool.hpp"
/* A closed system (Close, Dispose) has no handle. */
static tpu_system* tpurt_cs_handle(tpurt::TpuSystem* system) noexcept {
  try {
    return system->handle();
  } catch (...) {
    return nullptr;
  }
}
extern "C" {
/* NULL, with the thread's last error set, when the system is closed. */
SWIGEXPORT tpurt::ReplicaPool* SWIGSTDCALL TpurtCsPoolNew(tpurt::TpuSystem* system, int cores) {
  tpu_system* s = tpurt_cs_handle(system);
  if (!s) {
    tpu_set_last_error(TPU_FAILED_PRECONDITION, "the TPU system is closed");
    return nullptr;
  }
  try {
    return new tpurt::ReplicaPool(s, cores);
  } catch (const tpurt::Error& e) {
    tpu_set_last_error(static_cast<tpu_status>(e.code()), e.what());
    return nullptr;
  }
}
SWIGEXPORT void SWIGSTDCALL TpurtCsPoolStop(tpurt::ReplicaPool* pool) { pool->stop(); }
SWIGEXPORT void SWIGSTDCALL TpurtCsPoolFree(tpurt::ReplicaPool* pool) { delete pool; }
SWIGEXPORT int SWIGSTDCALL TpurtCsPoolRunning(tpurt::ReplicaPool* pool) { return pool->running(); }
/* The first join error since the last call (its message as the last error), and the
 * cores to serve again; 0: none. */
SWIGEXPORT int SWIGSTDCALL TpurtCsPoolTakeEnded(tpurt::ReplicaPool* pool, int* cores, int capacity, int* count) {
  std::string message;
  std::vector<int> ended;
  const int code = pool->takeEnded(&message, &ended);
  *count = 0;
  for (int c : ended)
    if (*count < capacity) cores[(*count)++] = c;
  if (code) tpu_set_last_error(static_cast<tpu_status>(code), message.c_str());
  return code;
}
/* NULL for a core out of the pool's range (ReplicaPool.cs never asks for one). */
SWIGEXPORT tpurt::ReplicaPool::Seat* SWIGSTDCALL TpurtCsSeat(tpurt::ReplicaPool* pool, int core) {
  try {
    return pool->seat(core);
  } catch (...) {
    return nullptr;
  }
}
SWIGEXPORT void SWIGSTDCALL TpurtCsSeatFree(tpurt::ReplicaPool::Seat* seat) { delete seat; }
SWIGEXPORT tpurt::ReplicaContext* SWIGSTDCALL TpurtCsSeatContext(tpurt::ReplicaPool::Seat* seat) {
  return &seat->context();
}
/* Leaves with `status`, joins for the next: tpurt::ReplicaPool::Seat::kRun (then the
 * participant's key and counts are set), kStop or kEnded. */
SWIGEXPORT int SWIGSTDCALL TpurtCsNext(tpurt::ReplicaPool::Seat* seat, int status, int64_t* key, int* numInputs,
                                       int* numOutputs, int* replicaId, int* logicalCore) {
  const int turn = seat->next(status);
  if (turn == tpurt::ReplicaPool::Seat::kRun) {
    *key = seat->key();
    *numInputs = seat->numInputs();
    *numOutputs = seat->numOutputs();
    *replicaId = seat->context().replicaId();
    *logicalCore = seat->context().logicalCore();
  }
  return turn;
}
/* tpu.replicate's step with default options on the pool, without SWIG's vectors:
 * inputs are the proxies' tpurt::Tensor*, outputs come back as new tpurt::Tensor*
 * (numReplicas * numOutputs). On failure the thread's last error has the message. */
SWIGEXPORT int SWIGSTDCALL TpurtCsReplicateJoined(tpurt::TpuSystem* system, int64_t key, int numReplicas,
                                                  int numInputs, tpurt::Tensor** inputs, int numOutputs,
                                                  tpurt::Tensor** outputs) {
  tpu_system* s = tpurt_cs_handle(system);
  if (!s) return tpu_set_last_error(TPU_FAILED_PRECONDITION, "the TPU system is closed");
  return tpurt::replicate_joined(s, key, numReplicas, numInputs, inputs, numOutputs, outputs, 0);
}
SWIGEXPORT const char* SWIGSTDCALL TpurtCsLastError() { return tpu_last_error(); }
SWIGEXPORT int SWIGSTDCALL TpurtCsShutdown(tpurt::TpuSystem* system) {
  tpu_system* s = tpurt_cs_handle(system);
  return s ? tpu_system_shutdown(s) : TPU_OK;
}
}
%}
