package tpurt

// Outside compilation with tensors: the replica's tensors reach the host function
// through the C call's inputs (tpu_outside_compilation_tensors), and the host's come
// back through its outputs.

// hostTensorFunction is the director for OutsideCompilationTensors.
type hostTensorFunction struct {
	fn       func(replica int, inputs []*Tensor) ([]*Tensor, error)
	director RawHostTensorComputation
}

func (h *hostTensorFunction) Run(replica int, inputs TensorVector) (status TpurtStatus) {
	defer func() {
		if r := recover(); r != nil {
			code, msg := codeOf(fromPanic(r))
			status = RawHostTensorComputationFailHost(TpurtStatus(code), msg)
		}
	}()
	in := make([]*Tensor, inputs.Size())
	for i := range in {
		in[i] = wrapTensor(NewRawTensor__SWIG_1(inputs.Get(i)))
	}
	out, err := h.fn(replica, in)
	var v TensorVector
	if err == nil {
		v, err = tensorVector(out, "the host function's result")
	}
	if err != nil {
		code, msg := codeOf(err)
		return RawHostTensorComputationFailHost(TpurtStatus(code), msg)
	}
	defer DeleteTensorVector(v)
	h.director.SetOutputs(v)
	return RawStatus_Ok
}

// OutsideCompilationTensors is tf.tpu.outside_compilation(computation, *args) with
// tensors: fn runs on the host with this replica's inputs and its result comes back to
// the replica. Its error fails the replica.
func OutsideCompilationTensors(ctx *Context, fn func(replica int, inputs []*Tensor) ([]*Tensor, error),
	inputs ...*Tensor) ([]*Tensor, error) {
	if ctx == nil {
		return nil, newError(CodeInvalidArgument, "OutsideCompilationTensors: the context is nil")
	}
	if fn == nil {
		return nil, newError(CodeInvalidArgument, "OutsideCompilationTensors: the function is nil")
	}
	v, err := tensorVector(inputs, "inputs")
	if err != nil {
		return nil, err
	}
	defer DeleteTensorVector(v)
	h := &hostTensorFunction{fn: fn}
	h.director = NewDirectorRawHostTensorComputation(h)
	defer DeleteDirectorRawHostTensorComputation(h.director)
	out, err := try(func() TensorVector { return ctx.raw.OutsideCompilationTensors(h.director, v) })
	if err != nil {
		return nil, err
	}
	return fromTensorVector(out), nil
}

// HostFunction is tf.tpu.outside_compilation's computation: it runs on the host with
// the positional and keyword arguments and returns its tensors (nil: none).
type HostFunction func(replica int, args []interface{}, kwargs map[string]interface{}) ([]*Tensor, error)

// OutsideCompilation is tf.tpu.outside_compilation(computation, *args, **kwargs): fn
// runs on the host (outside the replicated computation) with positional args and
// keyword args, and its tensors come back to the replica, as TensorFlow returns what
// the computation returns. *Tensor args and the tensors returned cross the C ABI
// (tpu_outside_compilation_tensors). Its error fails the replica.
func OutsideCompilation(ctx *Context, fn HostFunction, args []interface{}, kwargs map[string]interface{}) ([]*Tensor, error) {
	if ctx == nil {
		return nil, newError(CodeInvalidArgument, "OutsideCompilation: the context is nil")
	}
	if fn == nil {
		return nil, newError(CodeInvalidArgument, "OutsideCompilation: the function is nil")
	}
	var tensors []*Tensor
	var at []int
	for i, a := range args {
		if t, ok := a.(*Tensor); ok {
			tensors = append(tensors, t)
			at = append(at, i)
		}
	}
	return OutsideCompilationTensors(ctx, func(replica int, inputs []*Tensor) ([]*Tensor, error) {
		bound := append([]interface{}(nil), args...)
		for k, i := range at {
			bound[i] = inputs[k]
		}
		return fn(replica, bound, kwargs)
	}, tensors...)
}

// OutsideCompilationDyn takes the function as an interface{}: a HostFunction (or its
// func type), a func(int, []interface{}) ([]*Tensor, error), or one of those returning
// only an error, or a func(int) error.
func OutsideCompilationDyn(ctx *Context, fn interface{}, args []interface{}, kwargs map[string]interface{}) ([]*Tensor, error) {
	var h HostFunction
	switch f := fn.(type) {
	case HostFunction:
		h = f
	case func(int, []interface{}, map[string]interface{}) ([]*Tensor, error):
		h = f
	case func(int, []interface{}) ([]*Tensor, error):
		h = func(r int, a []interface{}, _ map[string]interface{}) ([]*Tensor, error) { return f(r, a) }
	case func(int, []interface{}, map[string]interface{}) error:
		h = func(r int, a []interface{}, kw map[string]interface{}) ([]*Tensor, error) { return nil, f(r, a, kw) }
	case func(int) error:
		h = func(r int, _ []interface{}, _ map[string]interface{}) ([]*Tensor, error) { return nil, f(r) }
	default:
		return nil, newError(CodeInvalidArgument, "OutsideCompilationDyn: %T is not a host function", fn)
	}
	return OutsideCompilation(ctx, h, args, kwargs)
}
