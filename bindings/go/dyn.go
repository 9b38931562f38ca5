package tpurt

// The *Dyn forms mirror tf.tpu's _dyn overloads: arguments arrive as interface{} and a
// wrong type is an ErrInvalidArgument naming it.

// InitializeSystemDyn takes SystemOptions, *SystemOptions or nil (the defaults).
func InitializeSystemDyn(opts interface{}) (*System, error) {
	switch o := opts.(type) {
	case SystemOptions:
		return InitializeSystem(o)
	case *SystemOptions:
		if o != nil {
			return InitializeSystem(*o)
		}
	case nil:
	default:
		return nil, newError(CodeInvalidArgument, "InitializeSystemDyn: options must be SystemOptions, not %T", opts)
	}
	return InitializeSystem(SystemOptions{})
}

// ShutdownSystemDyn takes a *System and a job that is a string or nil.
func ShutdownSystemDyn(system interface{}, job interface{}) error {
	s, ok := system.(*System)
	if !ok {
		return newError(CodeInvalidArgument, "ShutdownSystemDyn: expected a *System, not %T", system)
	}
	name, ok := job.(string)
	if !ok && job != nil {
		return newError(CodeInvalidArgument, "ShutdownSystemDyn: job must be a string or nil, not %T", job)
	}
	return ShutdownSystem(s, name)
}

// Bfloat16ScopeDyn takes a *Context.
func Bfloat16ScopeDyn(ctx interface{}) (func() error, error) {
	c, ok := ctx.(*Context)
	if !ok {
		return nil, newError(CodeInvalidArgument, "Bfloat16ScopeDyn: expected a *Context, not %T", ctx)
	}
	return Bfloat16Scope(c)
}

// OutsideCompilationArgs is OutsideCompilation without keyword arguments.
func OutsideCompilationArgs(ctx *Context, fn func(replica int, args []interface{}) ([]*Tensor, error), args ...interface{}) ([]*Tensor, error) {
	if fn == nil {
		return nil, newError(CodeInvalidArgument, "OutsideCompilationArgs: the function is nil")
	}
	return OutsideCompilation(ctx, func(replica int, a []interface{}, _ map[string]interface{}) ([]*Tensor, error) {
		return fn(replica, a)
	}, args, nil)
}
