/* Go: SWIG layer under the hand-written idiomatic package (tpurt.go's neighbours).
 * Errors become a Go panic "tpurt:<code>:<message>" that the Go layer recovers into
 * an *Error; bulk data goes through Go slices without copies. */
%module(directors="1") tpurt
#define TPURT_MODULE_DECLARED
#define TPURT_RAISE_DEFINED
%{
#include <string>
#define TPURT_RAISE(code, message) \
  do { \
    std::string tpurt_panic_ = "tpurt:" + std::to_string(code) + ":" + (message); \
    _swig_gopanic(tpurt_panic_.c_str()); \
  } while (0)
%}

/* Go slices map to (pointer, count) pairs: the C++ side reads or fills the Go
 * memory in place, which cgo allows because these slices hold no Go pointers. */
%define TPURT_SLICE(CTYPE, GOTYPE)
%typemap(gotype) (const CTYPE* data, size_t count), (CTYPE* out, size_t count), (CTYPE* data, size_t count) "[]GOTYPE"
%typemap(in) (const CTYPE* data, size_t count), (CTYPE* out, size_t count), (CTYPE* data, size_t count)
%{ $1 = ($1_ltype)$input.array; $2 = (size_t)$input.len; %}
%enddef
TPURT_SLICE(float, float32)
TPURT_SLICE(double, float64)
TPURT_SLICE(int32_t, int32)
TPURT_SLICE(long long, int64)

%rename(RawEnvironmentVariableAt) tpurt::environmentVariable;
/* The idiomatic layer owns the plain names (Tensor, System, Core, ...). */
%rename("Raw%s", %$isclass) "";
%rename("Raw%(firstuppercase)s", %$isfunction, %$not %$ismember) "";
%rename("Raw%s", %$isenum) "";

%include "../tpurt.i"
