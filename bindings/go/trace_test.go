package tpurt

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// SystemOptions.TracePath: a step's trace (Chrome trace-event JSON) once the system
// is shut down, and an unwritable path refused by name.
func TestTracePathWritesATraceOfEveryStep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	s := must(InitializeSystem(SystemOptions{NumCores: 2, TracePath: path}))
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		_, err := CrossReplicaSum(ctx, []float32{1, 2})
		return nil, err
	}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	trace := string(must(os.ReadFile(path)))
	for _, want := range []string{`"name":"all_reduce"`, `"name":"replica 1"`, `"verdict":"OK"`} {
		if !strings.Contains(trace, want) {
			t.Errorf("the trace lacks %s: %s", want, trace)
		}
	}
	_, err = InitializeSystem(SystemOptions{NumCores: 2, TracePath: "/nonexistent-dir/t.json"})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "/nonexistent-dir/t.json") {
		t.Fatalf("an unwritable trace path: %v", err)
	}
}
