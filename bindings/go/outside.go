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

// outsideCompilationArgs runs fn on the host with args whose *Tensor entries crossed
// the C call as its inputs (OutsideCompilation's path).
func outsideCompilationArgs(ctx *Context, args []interface{}, fn func(replica int, args []interface{}) error) error {
	var tensors []*Tensor
	var at []int
	for i, a := range args {
		if t, ok := a.(*Tensor); ok {
			tensors = append(tensors, t)
			at = append(at, i)
		}
	}
	_, err := OutsideCompilationTensors(ctx, func(replica int, inputs []*Tensor) ([]*Tensor, error) {
		bound := append([]interface{}(nil), args...)
		for k, i := range at {
			bound[i] = inputs[k]
		}
		return nil, fn(replica, bound)
	}, tensors...)
	return err
}

func hasTensor(args []interface{}) bool {
	for _, a := range args {
		if _, ok := a.(*Tensor); ok {
			return true
		}
	}
	return false
}
