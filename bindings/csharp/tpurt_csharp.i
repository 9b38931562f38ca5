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
/* ReplicaContext.LogicalCore is a property (ModelParallel.cs); the method is its getter. */
%rename(GetLogicalCore) tpurt::ReplicaContext::logicalCore;
%csmethodmodifiers tpurt::ReplicaContext::logicalCore "internal";
/* The struct owns the name; the accessor by index reads "environment variable at". */
%rename(EnvironmentVariableAt) tpurt::environmentVariable;
/* The director the hand layer subclasses; its native name stays free for tpu's. */
%rename(NativeComputation) tpurt::Computation;
%rename(NativeHostComputation) tpurt::HostComputation;
%rename(NativeHostTensorComputation) tpurt::HostTensorComputation;

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
 * computations kept alive for late replicas of a failed step. */
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

/* The same for a step's ids (EmbeddingInput): pinned arrays into the batch's vectors. */
%csmethodmodifiers tpurt::EmbeddingFeatureBatch::assignIds "internal unsafe";
%csmethodmodifiers tpurt::EmbeddingFeatureBatch::assignSampleIndices "internal unsafe";
%csmethodmodifiers tpurt::EmbeddingFeatureBatch::assignRowSplits "internal unsafe";
%csmethodmodifiers tpurt::EmbeddingFeatureBatch::assignWeights "internal unsafe";

%include "../tpurt.i"

/* After the interface, so that its %exception covers them (declared above: the modifiers). */
%extend tpurt::TpuSystem {
  void embeddingLoadFloats(int table, int variable, int64_t firstRow, int64_t numRows, const float* data, size_t count) {
    tpurt::detail::check(tpu_embedding_load($self->handle(), table, variable, firstRow, numRows, data, count));
  }
  /* Fills the rows held here; returns the count the rows need (null out, count 0: a size query). */
  long long embeddingRetrieveFloats(int table, int variable, int64_t firstRow, int64_t numRows, float* out, size_t count) {
    size_t n = 0;
    tpurt::detail::check(tpu_embedding_retrieve($self->handle(), table, variable, firstRow, numRows, out, count, &n));
    return static_cast<long long>(n);
  }
}

%extend tpurt::EmbeddingFeatureBatch {
  void assignIds(const long long* data, size_t count) { $self->ids.assign(data, data + count); }
  void assignSampleIndices(const long long* data, size_t count) { $self->sampleIndices.assign(data, data + count); }
  void assignRowSplits(const long long* data, size_t count) { $self->rowSplits.assign(data, data + count); }
  void assignWeights(const float* data, size_t count) { $self->weights.assign(data, data + count); }
}
