package tpurt

import "time"

// Whole-system checkpoints (include/tpurt/checkpoint.h): CheckpointSave and
// CheckpointRestore are collectives over every task of the system; a checkpoint holds
// every embedding table's rows and optimizer slots, named dense tensors (task 0's) and
// the step.

// CheckpointOptions: zero values are the defaults.
type CheckpointOptions struct {
	Timeout time.Duration // 0: the system's collective timeout; the wait for the other tasks
	Keep    int           // CheckpointSave: the newest complete checkpoints kept; 0 keeps all
}

func (o CheckpointOptions) raw() RawCheckpointOptions {
	r := NewRawCheckpointOptions()
	r.SetTimeoutMs(o.Timeout.Milliseconds())
	r.SetKeep(o.Keep)
	return r
}

// CheckpointSave saves the tables and tensors (by name; nil: none; task 0's are
// written) as dir's checkpoint step, and returns when it is complete on every task.
func (s *System) CheckpointSave(dir string, step int64, tensors map[string]*Tensor, opts CheckpointOptions) error {
	raw, err := s.handle()
	if err != nil {
		return err
	}
	names := NewStringVector()
	defer DeleteStringVector(names)
	list := make([]*Tensor, 0, len(tensors))
	for name, t := range tensors {
		names.Add(name)
		list = append(list, t)
	}
	v, err := tensorVector(list, "tensors")
	if err != nil {
		return err
	}
	defer DeleteTensorVector(v)
	o := opts.raw()
	defer DeleteRawCheckpointOptions(o)
	return try0(func() { RawCheckpointSave(raw, dir, step, names, v, o) })
}

// CheckpointLatest is the step of dir's newest complete checkpoint; ErrNotFound when
// it holds none.
func CheckpointLatest(dir string) (int64, error) {
	return try(func() int64 { return RawCheckpointLatest(dir) })
}

// CheckpointRestore restores dir's checkpoint step (-1: the newest complete one) into
// the tables and returns its step and the tensors named (the caller's to Close). When
// it fails nothing is loaded on any task.
func (s *System) CheckpointRestore(dir string, step int64, tensorNames []string, opts CheckpointOptions) (int64, map[string]*Tensor, error) {
	raw, err := s.handle()
	if err != nil {
		return 0, nil, err
	}
	names := NewStringVector()
	defer DeleteStringVector(names)
	for _, n := range tensorNames {
		names.Add(n)
	}
	o := opts.raw()
	defer DeleteRawCheckpointOptions(o)
	r, err := try(func() RawRestoredCheckpoint { return RawCheckpointRestore(raw, dir, step, names, o) })
	if err != nil {
		return 0, nil, err
	}
	defer DeleteRawRestoredCheckpoint(r)
	// The vector belongs to r: each tensor gets a reference of its own (not fromTensorVector,
	// which frees the vector).
	v := r.GetTensors()
	out := make(map[string]*Tensor, len(tensorNames))
	for i, name := range tensorNames {
		out[name] = wrapTensor(NewRawTensor__SWIG_1(v.Get(i)))
	}
	return r.GetStep(), out, nil
}
