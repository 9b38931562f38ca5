package tpurt

// Whole-system checkpoints (issue 31): a round trip onto another sharding and core
// count, CheckpointLatest, Keep, and refusals as the usual errors.

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func checkpointSystem(t *testing.T, cores int, sharding string) *System {
	t.Helper()
	config, err := EmbeddingConfigFromJSON(`{"table_descriptor": [{"name": "video", "vocabulary_size": 7, "dimension": 2,
	  "optimization_parameters": {"learning_rate": {"constant": 0.5}, "adagrad": {"initial_accumulator": 0.1}}}],
	  "feature_descriptor": [{"name": "watched", "table_id": 0, "input_shape": [2]}],
	  "sharding_strategy": "` + sharding + `"}`)
	if err != nil {
		t.Fatalf("EmbeddingConfigFromJSON: %v", err)
	}
	return newTestSystem(t, func(o *SystemOptions) {
		o.NumCores = cores
		o.EmbeddingConfig = config
	})
}

func TestCheckpointSaveRestoreOntoAnotherSharding(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpts")
	rows, acc := make([]float32, 14), make([]float32, 14)
	for i := range rows {
		rows[i] = float32(i)*1.25 - 3
		acc[i] = 0.5 + float32(i)
	}
	s := checkpointSystem(t, 2, "DIV_DEFAULT")
	must(0, s.EmbeddingLoad(0, 0, 0, 7, rows))
	must(0, s.EmbeddingLoad(0, 1, 0, 7, acc))
	if _, err := CheckpointLatest(dir); !errors.Is(err, ErrNotFound) {
		t.Fatalf("CheckpointLatest of an empty dir: %v, want ErrNotFound", err)
	}
	w := must(NewTensor([]int64{3}, []float32{1, -2, 3}))
	defer w.Close()
	if err := s.CheckpointSave(dir, 12, map[string]*Tensor{"w": w}, CheckpointOptions{}); err != nil {
		t.Fatalf("CheckpointSave: %v", err)
	}
	if step := must(CheckpointLatest(dir)); step != 12 {
		t.Fatalf("CheckpointLatest: %d, want 12", step)
	}
	if err := s.CheckpointSave(dir, 12, nil, CheckpointOptions{}); !errors.Is(err, ErrAlreadyExists) ||
		!strings.Contains(err.Error(), "ckpt-12") {
		t.Fatalf("saving step 12 again: %v, want ErrAlreadyExists naming ckpt-12", err)
	}
	s.Close()

	s = checkpointSystem(t, 3, "MOD")
	step, tensors, err := s.CheckpointRestore(dir, -1, []string{"w"}, CheckpointOptions{})
	if err != nil || step != 12 {
		t.Fatalf("CheckpointRestore: step %d, %v", step, err)
	}
	if got := must(Values[float32](tensors["w"])); !reflect.DeepEqual(got, []float32{1, -2, 3}) {
		t.Fatalf("w: %v", got)
	}
	tensors["w"].Close()
	if got := must(s.EmbeddingRetrieve(0, 0, 0, 7)); !reflect.DeepEqual(got, rows) {
		t.Fatalf("rows: %v, want %v", got, rows)
	}
	if got := must(s.EmbeddingRetrieve(0, 1, 0, 7)); !reflect.DeepEqual(got, acc) {
		t.Fatalf("accumulators: %v, want %v", got, acc)
	}
	if _, _, err := s.CheckpointRestore(dir, -1, []string{"bias"}, CheckpointOptions{}); !errors.Is(err, ErrNotFound) ||
		!strings.Contains(err.Error(), "no tensor named 'bias'") {
		t.Fatalf("restoring a missing tensor: %v", err)
	}
	opts := CheckpointOptions{Timeout: 5 * time.Second, Keep: 1}
	if err := s.CheckpointSave(dir, 13, nil, opts); err != nil {
		t.Fatalf("CheckpointSave 13: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ckpt-12")); !os.IsNotExist(err) {
		t.Fatalf("ckpt-12 is still there with Keep 1: %v", err)
	}
	if step, _, err := s.CheckpointRestore(dir, 13, nil, opts); err != nil || step != 13 {
		t.Fatalf("CheckpointRestore 13: %d, %v", step, err)
	}
}
