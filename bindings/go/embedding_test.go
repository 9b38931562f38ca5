package tpurt

// TPU embeddings (issue 20): configuration accessors, load / retrieve, and a
// 2-replica step whose activations and SGD updates are checked against values worked
// out by hand.

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// Two tables over a 2-core system: "words" (4 x 2, SGD with the dynamic learning rate
// of tag 0) and "docs" (3 x 1, Adagrad). Features 0 and 1 look up words, 2 docs.
const embeddingJSON = `{
  "table_descriptor": [
    {"name": "words", "vocabulary_size": 4, "dimension": 2,
     "optimization_parameters": {"learning_rate": {"dynamic": {"tag": 0}}, "stochastic_gradient_descent": {}}},
    {"name": "docs", "vocabularySize": "3", "dimension": 1,
     "optimization_parameters": {"learning_rate": {"constant": 0.1}, "adagrad": {}}}],
  "feature_descriptor": [
    {"name": "watched", "table_id": 0, "input_shape": [2]},
    {"name": "liked", "table_id": 0, "input_shape": [2]},
    {"name": "read", "table_id": 1, "input_shape": [1]}],
  "mode": "TRAINING"
}`

const embeddingReplicas = 2

func newEmbeddingSystem(t *testing.T) *System {
	t.Helper()
	config, err := EmbeddingConfigFromJSON(embeddingJSON)
	if err != nil {
		t.Fatalf("EmbeddingConfigFromJSON: %v", err)
	}
	return newTestSystem(t, func(o *SystemOptions) {
		o.NumCores = embeddingReplicas
		o.EmbeddingConfig = config
	})
}

// wordsRows are the rows loaded into "words": row i is [i+1, 10(i+1)].
var wordsRows = []float32{1, 10, 2, 20, 3, 30, 4, 40}

func expectCode(t *testing.T, what string, err error, sentinel *Error, mentions ...string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Errorf("%s: got %v, want %v", what, err, sentinel.Code)
		return
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: %q does not name %q", what, err.Error(), m)
		}
	}
}

func TestEmbeddingConfigurationAccessors(t *testing.T) {
	s := newEmbeddingSystem(t)
	if m := must(s.EmbeddingMode()); m != EmbeddingModeTraining || m.String() != "TRAINING" {
		t.Errorf("EmbeddingMode %v", m)
	}
	if len(must(s.EmbeddingConfig())) == 0 {
		t.Error("EmbeddingConfig is empty")
	}
	tables := must(s.EmbeddingTables())
	want := []EmbeddingTable{
		{Name: "words", VocabularySize: 4, Dimension: 2, Optimizer: OptimizerSGD, Variables: []string{"parameters"}},
		{Name: "docs", VocabularySize: 3, Dimension: 1, Optimizer: OptimizerAdagrad, Variables: []string{"parameters", "accumulators"}},
	}
	if fmt.Sprint(tables) != fmt.Sprint(want) {
		t.Errorf("EmbeddingTables\n got %v\nwant %v", tables, want)
	}
	if n := must(s.EmbeddingNumTables()); n != 2 {
		t.Errorf("EmbeddingNumTables %d", n)
	}
	if i := must(s.EmbeddingTableIndex("docs")); i != 1 || must(s.EmbeddingTableName(i)) != "docs" {
		t.Errorf("EmbeddingTableIndex(docs) %d", i)
	}
	if v, d := must(s.EmbeddingVocabularySize(0)), must(s.EmbeddingDimension(0)); v != 4 || d != 2 {
		t.Errorf("words is %d x %d", v, d)
	}
	if o := must(s.EmbeddingTableOptimizer(1)); o != OptimizerAdagrad || o.String() != "Adagrad" {
		t.Errorf("EmbeddingTableOptimizer(1) %v", o)
	}
	if n, name := must(s.EmbeddingNumVariables(1)), must(s.EmbeddingVariableName(1, 1)); n != 2 || name != "accumulators" {
		t.Errorf("docs variables %d, 1 is %q", n, name)
	}
	if v := must(s.EmbeddingVariableIndex(1, "accumulators")); v != 1 {
		t.Errorf("EmbeddingVariableIndex(accumulators) %d", v)
	}

	features := must(s.EmbeddingFeatures())
	wantF := []EmbeddingFeature{{"watched", 0, []int64{2, 2}}, {"liked", 0, []int64{2, 2}}, {"read", 1, []int64{1, 1}}}
	if fmt.Sprint(features) != fmt.Sprint(wantF) {
		t.Errorf("EmbeddingFeatures\n got %v\nwant %v", features, wantF)
	}
	if features[0].Samples() != 2 || features[2].Samples() != 1 {
		t.Errorf("Samples %d %d", features[0].Samples(), features[2].Samples())
	}
	if n := must(s.EmbeddingNumFeatures()); n != 3 {
		t.Errorf("EmbeddingNumFeatures %d", n)
	}
	if i := must(s.EmbeddingFeatureIndex("liked")); i != 1 || must(s.EmbeddingFeatureName(i)) != "liked" ||
		must(s.EmbeddingFeatureTable(2)) != 1 || !equal(must(s.EmbeddingFeatureShape(2)), []int64{1, 1}) {
		t.Errorf("feature accessors: liked is %d", i)
	}

	// DIV_DEFAULT over 2 cores: words rows 0-1 on core 0, 2-3 on core 1; docs (3 rows)
	// 0-1 on core 0, 2 on core 1.
	for _, c := range []struct {
		table    int
		row      int64
		core     int
		shardRow int64
	}{{0, 0, 0, 0}, {0, 1, 0, 1}, {0, 2, 1, 0}, {0, 3, 1, 1}, {1, 1, 0, 1}, {1, 2, 1, 0}} {
		core, shardRow, err := s.EmbeddingRowOwner(c.table, c.row)
		if err != nil || core != c.core || shardRow != c.shardRow {
			t.Errorf("EmbeddingRowOwner(%d, %d) = %d, %d, %v; want %d, %d", c.table, c.row, core, shardRow, err, c.core, c.shardRow)
		}
	}
	if core, err := try(func() int { return s.raw.EmbeddingRowCore(0, 3) }); err != nil || core != 1 {
		t.Errorf("raw EmbeddingRowCore %d %v", core, err)
	}

	// Errors name what is wrong.
	_, err := s.EmbeddingTableIndex("nope")
	expectCode(t, "EmbeddingTableIndex(nope)", err, ErrNotFound, "nope")
	_, err = s.EmbeddingFeatureIndex("unheard")
	expectCode(t, "EmbeddingFeatureIndex(unheard)", err, ErrNotFound, "unheard")
	_, err = s.EmbeddingVariableIndex(1, "momenta")
	expectCode(t, "EmbeddingVariableIndex(momenta)", err, ErrNotFound, "momenta", "docs", "accumulators")
	_, err = s.EmbeddingTable(2)
	expectCode(t, "EmbeddingTable(2)", err, ErrOutOfRange, "2")
	_, err = s.EmbeddingFeatureShape(-1)
	expectCode(t, "EmbeddingFeatureShape(-1)", err, ErrOutOfRange, "-1")
	_, _, err = s.EmbeddingRowOwner(0, 4)
	expectCode(t, "EmbeddingRowOwner(0, 4)", err, ErrOutOfRange, "4", "words")
	_, err = s.EmbeddingVariableName(0, 1)
	expectCode(t, "EmbeddingVariableName(0, 1)", err, ErrOutOfRange, "1")
}

func TestEmbeddingConfigFromBadJSONNamesThePath(t *testing.T) {
	_, err := EmbeddingConfigFromJSON(`{"table_descriptor": [{"name": "t", "dimension": "wide"}]}`)
	expectCode(t, "a string dimension", err, ErrInvalidArgument, "table_descriptor[0].dimension")
}

func TestSystemWithoutEmbeddings(t *testing.T) {
	s := newTestSystem(t)
	if n, f := must(s.EmbeddingNumTables()), must(s.EmbeddingNumFeatures()); n != 0 || f != 0 {
		t.Errorf("%d tables, %d features", n, f)
	}
	if tables := must(s.EmbeddingTables()); len(tables) != 0 {
		t.Errorf("EmbeddingTables %v", tables)
	}
	_, err := s.EmbeddingRetrieve(0, 0, 0, 1)
	expectCode(t, "EmbeddingRetrieve without tables", err, ErrOutOfRange)
}

func TestEmbeddingLoadRetrieveRoundTrip(t *testing.T) {
	s := newEmbeddingSystem(t)
	// A fresh table is zeros, Adagrad's accumulators its initial value (0.1).
	if v := must(s.EmbeddingRetrieve(0, 0, 0, 4)); !equal(v, make([]float32, 8)) {
		t.Errorf("fresh words %v", v)
	}
	if v := must(s.EmbeddingRetrieveByName("docs", "accumulators", 0, 3)); !equal(v, []float32{0.1, 0.1, 0.1}) {
		t.Errorf("fresh accumulators %v", v)
	}

	if err := s.EmbeddingLoad(0, 0, 0, 4, wordsRows); err != nil {
		t.Fatal(err)
	}
	if v := must(s.EmbeddingRetrieve(0, 0, 0, 4)); !equal(v, wordsRows) {
		t.Errorf("words after load %v", v)
	}
	// Rows 1-2 only, in place.
	if err := s.EmbeddingLoad(0, 0, 1, 2, []float32{-1, -2, -3, -4}); err != nil {
		t.Fatal(err)
	}
	middle := make([]float32, 4)
	if err := s.EmbeddingRetrieveInto(0, 0, 1, 2, middle); err != nil || !equal(middle, []float32{-1, -2, -3, -4}) {
		t.Errorf("rows 1-2 %v %v", middle, err)
	}
	if v := must(s.EmbeddingRetrieve(0, 0, 0, 4)); !equal(v, []float32{1, 10, -1, -2, -3, -4, 4, 40}) {
		t.Errorf("words after a partial load %v", v)
	}
	// By name, a slot variable; and the support layer's vector forms agree.
	if err := s.EmbeddingLoadByName("docs", "accumulators", 0, 3, []float32{0.5, 1.5, 2.5}); err != nil {
		t.Fatal(err)
	}
	back := s.raw.EmbeddingRetrieve(1, 1, 0, 3)
	if got := []float32{back.Get(0), back.Get(1), back.Get(2)}; !equal(got, []float32{0.5, 1.5, 2.5}) {
		t.Errorf("raw retrieve of accumulators %v", got)
	}
	DeleteFloatVector(back)
	values := floatVector([]float32{7, 8, 9})
	if err := try0(func() { s.raw.EmbeddingLoad(1, 0, 0, 3, values) }); err != nil {
		t.Error(err)
	}
	DeleteFloatVector(values)
	if v := must(s.EmbeddingRetrieveByName("docs", "parameters", 0, 3)); !equal(v, []float32{7, 8, 9}) {
		t.Errorf("docs parameters %v", v)
	}

	// Bad calls name the value and change nothing.
	err := s.EmbeddingLoad(0, 0, 0, 2, []float32{1, 2, 3})
	expectCode(t, "3 values for 2 rows of 2", err, ErrInvalidArgument, "3")
	err = s.EmbeddingLoad(0, 0, 3, 2, []float32{1, 2, 3, 4})
	expectCode(t, "rows 3-4 of 4", err, ErrOutOfRange, "words")
	err = s.EmbeddingLoad(0, 1, 0, 1, []float32{1, 2})
	expectCode(t, "SGD has no variable 1", err, ErrOutOfRange, "1")
	err = s.EmbeddingRetrieveInto(0, 0, 0, 2, make([]float32, 3))
	expectCode(t, "RetrieveInto 3 floats for 4", err, ErrInvalidArgument, "3", "4")
	_, err = s.EmbeddingRetrieve(0, 0, 0, -1)
	expectCode(t, "-1 rows", err, ErrOutOfRange, "-1")
	err = s.EmbeddingLoadByName("docs", "velocities", 0, 1, []float32{1})
	expectCode(t, "load of velocities", err, ErrNotFound, "velocities")
	_, err = s.EmbeddingRetrieveByName("videos", "parameters", 0, 1)
	expectCode(t, "retrieve of videos", err, ErrNotFound, "videos")
	if v := must(s.EmbeddingRetrieve(0, 0, 0, 4)); !equal(v, []float32{1, 10, -1, -2, -3, -4, 4, 40}) {
		t.Errorf("words after bad calls %v", v)
	}

	// Not from inside a computation.
	_, err = ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		return nil, s.EmbeddingLoad(0, 0, 0, 1, []float32{0, 0})
	}, embeddingReplicas)
	expectCode(t, "EmbeddingLoad inside a step", err, ErrFailedPrecondition)
}

// The batches of the hand-worked step, per replica:
//
//	replica 0: watched COO, SUM: sample 0 = 1*row0 + 2*row1, sample 1 = 0.5*row3;
//	           liked ragged, MEAN: sample 0 = (row2 + row3)/2, sample 1 = row1
//	replica 1: watched COO: sample 0 no ids, sample 1 = row2;
//	           liked ragged, MEAN: sample 0 no ids, sample 1 = (row0 + row0)/2
//
// "read" (docs) is not enqueued: its activation and gradient are nil.
func handWorkedBatches(replica int) []EmbeddingFeatureBatch {
	if replica == 0 {
		return []EmbeddingFeatureBatch{
			{Feature: 0, IDs: []int64{0, 1, 3}, SampleIndices: []int64{0, 0, 1}, Weights: []float32{1, 2, 0.5}},
			{Feature: 1, IDs: []int64{2, 3, 1}, RowSplits: []int64{0, 2, 3}, Combiner: CombinerMean},
		}
	}
	return []EmbeddingFeatureBatch{
		{Feature: 1, IDs: []int64{0, 0}, RowSplits: []int64{0, 0, 2}, Combiner: CombinerMean},
		{Feature: 0, IDs: []int64{2}, SampleIndices: []int64{1}},
	}
}

// The hand-worked step's activations, [feature][replica], row-major: with rows
// [1,10] [2,20] [3,30] [4,40].
var wantActivations = [2][2][]float32{
	{{5, 50, 2, 20}, {0, 0, 3, 30}},
	{{3.5, 35, 2, 20}, {0, 0, 1, 10}},
}

// handWorkedStep enqueues, checks the activations and sends these gradients
// ([feature][replica]), by feature index or by name.
func handWorkedStep(ctx *Context, byName bool, f *failures) ([]*Tensor, error) {
	gradients := [2][2][]float32{
		{{1, 0, 0, 1}, {9, 9, 1, 1}},
		{{2, 2, 4, 0}, {0, 0, 6, 2}},
	}
	names := []string{"watched", "liked"}
	r := ctx.ReplicaID()
	batches := handWorkedBatches(r)
	var activations []*Tensor
	var err error
	if byName {
		for i := range batches {
			batches[i].FeatureName, batches[i].Feature = names[batches[i].Feature], 0
		}
		if err := ctx.EmbeddingEnqueue(batches...); err != nil {
			return nil, err
		}
		byName, err := ctx.EmbeddingRecvActivationsByName()
		if err != nil {
			return nil, err
		}
		if len(byName) != 2 {
			return nil, fmt.Errorf("replica %d: activations by name %v", r, byName)
		}
		activations = []*Tensor{byName["watched"], byName["liked"], nil}
	} else {
		if err := ctx.EmbeddingEnqueue(batches...); err != nil {
			return nil, err
		}
		if activations, err = ctx.EmbeddingRecvActivations(); err != nil {
			return nil, err
		}
	}
	if len(activations) != 3 || activations[2] != nil {
		return nil, fmt.Errorf("replica %d: activations %v", r, activations)
	}
	grads := make([]*Tensor, 3)
	for feature := 0; feature < 2; feature++ {
		if dims := must(activations[feature].Dims()); !equal(dims, []int64{2, 2}) {
			f.add("replica %d feature %d: dims %v", r, feature, dims)
		}
		if v := must(Values[float32](activations[feature])); !equal(v, wantActivations[feature][r]) {
			f.add("replica %d feature %d: activation %v, want %v", r, feature, v, wantActivations[feature][r])
		}
		grads[feature] = must(NewTensor([]int64{2, 2}, gradients[feature][r]))
	}
	if byName {
		err = ctx.EmbeddingSendGradientsByName(map[string]*Tensor{"watched": grads[0], "liked": grads[1]}, []float32{0.5})
	} else {
		err = ctx.EmbeddingSendGradients(grads, []float32{0.5})
	}
	return activations, err
}

func TestEmbeddingStepActivationsAndSGD(t *testing.T) {
	for _, byName := range []bool{false, true} {
		t.Run(fmt.Sprintf("byName=%v", byName), func(t *testing.T) { embeddingStepActivationsAndSGD(t, byName) })
	}
}

func embeddingStepActivationsAndSGD(t *testing.T, byName bool) {
	s := newEmbeddingSystem(t)
	if err := s.EmbeddingLoad(0, 0, 0, 4, wordsRows); err != nil {
		t.Fatal(err)
	}
	docs := []float32{7, 8, 9}
	if err := s.EmbeddingLoadByName("docs", "parameters", 0, 3, docs); err != nil {
		t.Fatal(err)
	}
	var f failures
	outputs, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		if n, err := ctx.EmbeddingNumFeatures(); err != nil || n != 3 {
			return nil, fmt.Errorf("EmbeddingNumFeatures %d %v", n, err)
		}
		activations, err := handWorkedStep(ctx, byName, &f)
		if err != nil {
			return nil, err
		}
		// Returned as an output, an activation outlives the step.
		return []*Tensor{activations[0]}, nil
	}, embeddingReplicas, WithNumOutputs(1))
	if err != nil {
		t.Fatal(err)
	}
	f.check(t)
	for r := range outputs {
		if v := must(Values[float32](outputs[r][0])); !equal(v, wantActivations[0][r]) {
			t.Errorf("replica %d's output %v", r, v)
		}
	}

	// Each row's gradient, summed over the step (a MEAN id gets weight/sum of weights):
	//   row0: 1*[1,0] (r0 watched) + 2 * 1/2*[6,2] (r1 liked)  = [7, 2]
	//   row1: 2*[1,0] (r0 watched) + [4,0] (r0 liked)          = [6, 0]
	//   row2: 1/2*[2,2] (r0 liked) + [1,1] (r1 watched)        = [2, 2]
	//   row3: 0.5*[0,1] (r0 watched) + 1/2*[2,2] (r0 liked)    = [1, 1.5]
	// (r1's watched sample 0 has no ids: its [9,9] touches nothing.) SGD, rate 0.5:
	want := []float32{1 - 3.5, 10 - 1, 2 - 3, 20, 3 - 1, 30 - 1, 4 - 0.5, 40 - 0.75}
	if v := must(s.EmbeddingRetrieve(0, 0, 0, 4)); !equal(v, want) {
		t.Errorf("words after the step\n got %v\nwant %v", v, want)
	}
	if v := must(s.EmbeddingRetrieveByName("docs", "parameters", 0, 3)); !equal(v, docs) {
		t.Errorf("docs (not enqueued) changed: %v", v)
	}
}

func TestEmbeddingSqrtNAndNoWeights(t *testing.T) {
	s := newEmbeddingSystem(t)
	if err := s.EmbeddingLoad(0, 0, 0, 4, wordsRows); err != nil {
		t.Fatal(err)
	}
	// Weights 3 and 4 on rows 0 and 1: (3*[1,10] + 4*[2,20]) / 5 = [2.2, 22].
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		if name, err := ctx.EmbeddingFeatureName(1); err != nil || name != "liked" {
			return nil, fmt.Errorf("ctx.EmbeddingFeatureName(1) %q %v", name, err)
		}
		if _, err := ctx.EmbeddingFeatureName(3); !errors.Is(err, ErrOutOfRange) {
			return nil, fmt.Errorf("ctx.EmbeddingFeatureName(3): %v", err)
		}
		if i, err := ctx.EmbeddingFeatureIndex("read"); err != nil || i != 2 {
			return nil, fmt.Errorf("ctx.EmbeddingFeatureIndex(read) %d %v", i, err)
		}
		if err := ctx.EmbeddingEnqueue(EmbeddingFeatureBatch{Feature: 1, IDs: []int64{0, 1},
			RowSplits: []int64{0, 2, 2}, Weights: []float32{3, 4}, Combiner: CombinerSqrtN}); err != nil {
			return nil, err
		}
		a, err := ctx.EmbeddingRecvActivations()
		if err != nil {
			return nil, err
		}
		if a[0] != nil || a[2] != nil {
			return nil, fmt.Errorf("activations of features not enqueued: %v", a)
		}
		v := must(Values[float32](a[1]))
		want := []float32{2.2, 22, 0, 0}
		for i := range v {
			if math.Abs(float64(v[i]-want[i])) > 1e-5 {
				return nil, fmt.Errorf("sqrtn activation %v, want %v", v, want)
			}
		}
		return nil, ctx.EmbeddingSendGradients([]*Tensor{nil, must(Zeros(Float32, []int64{2, 2})), nil}, []float32{1})
	}, embeddingReplicas)
	if err != nil {
		t.Fatal(err)
	}
	if v := must(s.EmbeddingRetrieve(0, 0, 0, 4)); !equal(v, wordsRows) {
		t.Errorf("zero gradients changed words: %v", v)
	}
}

func TestEmbeddingBadIDFailsTheStepAndChangesNothing(t *testing.T) {
	s := newEmbeddingSystem(t)
	if err := s.EmbeddingLoad(0, 0, 0, 4, wordsRows); err != nil {
		t.Fatal(err)
	}
	step := func(bad EmbeddingFeatureBatch) error {
		_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
			batches := handWorkedBatches(ctx.ReplicaID())
			if ctx.ReplicaID() == 1 {
				batches[1] = bad
			}
			if err := ctx.EmbeddingEnqueue(batches...); err != nil {
				return nil, err
			}
			activations, err := ctx.EmbeddingRecvActivations()
			if err != nil {
				return nil, err
			}
			grads := make([]*Tensor, 3)
			for i := 0; i < 2; i++ {
				grads[i] = must(NewTensor([]int64{2, 2}, []float32{1, 1, 1, 1}))
			}
			_ = activations
			return nil, ctx.EmbeddingSendGradients(grads, []float32{0.5})
		}, embeddingReplicas)
		return err
	}
	err := step(EmbeddingFeatureBatch{Feature: 0, IDs: []int64{2, 7}, SampleIndices: []int64{1, 0}})
	expectCode(t, "id 7 of a 4-row table", err, ErrInvalidArgument, "id 7", "watched", "words", "replica 1")
	err = step(EmbeddingFeatureBatch{Feature: 0, IDs: []int64{2}, SampleIndices: []int64{2}})
	expectCode(t, "sample index 2 of 2", err, ErrInvalidArgument, "2", "watched")
	err = step(EmbeddingFeatureBatch{Feature: 0, IDs: []int64{2}, RowSplits: []int64{0, 2, 1}})
	expectCode(t, "decreasing row splits", err, ErrInvalidArgument, "watched")
	err = step(EmbeddingFeatureBatch{Feature: 0, IDs: []int64{2}})
	expectCode(t, "neither sample indices nor row splits", err, ErrInvalidArgument, "watched")
	err = step(EmbeddingFeatureBatch{Feature: 5, IDs: []int64{2}, SampleIndices: []int64{0}})
	expectCode(t, "feature 5", err, ErrInvalidArgument, "5")
	err = step(EmbeddingFeatureBatch{Feature: 0, IDs: []int64{2}, SampleIndices: []int64{0}, Combiner: EmbeddingCombiner(7)})
	expectCode(t, "combiner 7", err, ErrInvalidArgument, "7")
	err = step(EmbeddingFeatureBatch{Feature: 0, IDs: []int64{2}, SampleIndices: []int64{0}, Weights: []float32{1, 2}})
	expectCode(t, "2 weights for 1 id", err, ErrInvalidArgument, "2 weights")
	err = step(EmbeddingFeatureBatch{Feature: 0, IDs: []int64{2}, SampleIndices: []int64{0}, Weights: []float32{float32(math.Inf(1))}})
	expectCode(t, "an infinite weight", err, ErrInvalidArgument, "watched")
	err = step(EmbeddingFeatureBatch{FeatureName: "clicked", IDs: []int64{2}, SampleIndices: []int64{0}})
	expectCode(t, "feature clicked", err, ErrNotFound, "clicked")
	err = step(EmbeddingFeatureBatch{Feature: 1, FeatureName: "watched", IDs: []int64{2}, SampleIndices: []int64{0}})
	expectCode(t, "feature 1 named watched", err, ErrInvalidArgument, "watched", "1")

	// Gradients sent by everyone, then one replica fails: the step applies nothing.
	_, err = ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		if err := ctx.EmbeddingEnqueue(handWorkedBatches(ctx.ReplicaID())...); err != nil {
			return nil, err
		}
		a, err := ctx.EmbeddingRecvActivations()
		if err != nil {
			return nil, err
		}
		if err := ctx.EmbeddingSendGradients(a, []float32{0.5}); err != nil {
			return nil, err
		}
		if ctx.ReplicaID() == 1 {
			return nil, ctx.Fail(CodeAborted, "replica 1 gives up after its gradients")
		}
		return nil, nil
	}, embeddingReplicas)
	expectCode(t, "a failure after the gradients", err, ErrAborted, "gives up")
	if v := must(s.EmbeddingRetrieve(0, 0, 0, 4)); !equal(v, wordsRows) {
		t.Errorf("failed steps changed words: %v", v)
	}

	// The system still runs steps, and the one after the failures applies.
	if err := step(handWorkedBatches(1)[1]); err != nil {
		t.Fatalf("a good step after the failures: %v", err)
	}
	if v := must(s.EmbeddingRetrieve(0, 0, 0, 4)); equal(v, wordsRows) {
		t.Errorf("a good step changed nothing: %v", v)
	}
}

func TestEmbeddingGradientErrors(t *testing.T) {
	s := newEmbeddingSystem(t)
	send := func(grads func(activations []*Tensor) []*Tensor, rates []float32) error {
		_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
			if err := ctx.EmbeddingEnqueue(handWorkedBatches(ctx.ReplicaID())...); err != nil {
				return nil, err
			}
			a, err := ctx.EmbeddingRecvActivations()
			if err != nil {
				return nil, err
			}
			return nil, ctx.EmbeddingSendGradients(grads(a), rates)
		}, embeddingReplicas)
		return err
	}
	same := func(a []*Tensor) []*Tensor { return a }
	err := send(same, nil)
	expectCode(t, "no learning rate for tag 0", err, ErrInvalidArgument, "learning rate")
	err = send(func(a []*Tensor) []*Tensor { return []*Tensor{a[0], a[1], must(Zeros(Float32, []int64{1, 1}))} }, []float32{1})
	expectCode(t, "a gradient for a feature not enqueued", err, ErrInvalidArgument, "read")
	err = send(func(a []*Tensor) []*Tensor { return []*Tensor{a[0], must(Zeros(Float32, []int64{2, 3})), nil} }, []float32{1})
	expectCode(t, "a gradient of another shape", err, ErrInvalidArgument, "liked", "[2,3]")
	closed := must(Zeros(Float32, []int64{2, 2}))
	closed.Close()
	err = send(func(a []*Tensor) []*Tensor { return []*Tensor{a[0], closed, nil} }, []float32{1})
	expectCode(t, "a closed gradient", err, ErrInvalidArgument, "gradients[1]")
	if v := must(s.EmbeddingRetrieve(0, 0, 0, 4)); !equal(v, make([]float32, 8)) {
		t.Errorf("failed steps changed words: %v", v)
	}
}

// The Go enums are the library's values.
func TestEmbeddingEnumsMatchTheLibrary(t *testing.T) {
	optimizers := map[EmbeddingOptimizer]TpurtEmbeddingOptimizer{
		OptimizerAdagrad: RawEmbeddingOptimizer_Adagrad, OptimizerSGD: RawEmbeddingOptimizer_Sgd,
		OptimizerFTRL: RawEmbeddingOptimizer_Ftrl, OptimizerAdam: RawEmbeddingOptimizer_Adam,
		OptimizerMomentum: RawEmbeddingOptimizer_Momentum, OptimizerRMSProp: RawEmbeddingOptimizer_RmsProp,
		OptimizerCenteredRMSProp: RawEmbeddingOptimizer_CenteredRmsProp, OptimizerAdadelta: RawEmbeddingOptimizer_Adadelta,
		OptimizerProximalAdagrad: RawEmbeddingOptimizer_ProximalAdagrad, OptimizerAdagradMomentum: RawEmbeddingOptimizer_AdagradMomentum,
	}
	for g, raw := range optimizers {
		if int(g) != int(raw) || strings.HasPrefix(g.String(), "EmbeddingOptimizer(") {
			t.Errorf("%v is %d, the library's %d", g, int(g), int(raw))
		}
	}
	combiners := map[EmbeddingCombiner]TpurtEmbeddingCombiner{
		CombinerSum: RawEmbeddingCombiner_Sum, CombinerMean: RawEmbeddingCombiner_Mean, CombinerSqrtN: RawEmbeddingCombiner_Sqrtn,
	}
	for g, raw := range combiners {
		if int(g) != int(raw) {
			t.Errorf("%v is %d, the library's %d", g, int(g), int(raw))
		}
	}
	modes := map[EmbeddingMode]TpurtEmbeddingMode{
		EmbeddingModeUnspecified: RawEmbeddingMode_Unspecified, EmbeddingModeInference: RawEmbeddingMode_Inference,
		EmbeddingModeTraining: RawEmbeddingMode_Training, EmbeddingModeBackwardPassOnly: RawEmbeddingMode_BackwardPassOnly,
	}
	for g, raw := range modes {
		if int(g) != int(raw) || strings.HasPrefix(g.String(), "EmbeddingMode(") {
			t.Errorf("%v is %d, the library's %d", g, int(g), int(raw))
		}
	}
}
