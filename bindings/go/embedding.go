package tpurt

// TPU embeddings (include/tpurt/embedding.h): the tables a system holds, loading and
// retrieving their variables, and one step's enqueue / activations / gradients from
// inside a computation.

import (
	"fmt"
	"math"
	"strings"
)

// EmbeddingOptimizer is a table's optimizer (OptimizationParameters' oneof field numbers).
type EmbeddingOptimizer int

// The optimizers.
const (
	OptimizerAdagrad         EmbeddingOptimizer = 3
	OptimizerSGD             EmbeddingOptimizer = 4
	OptimizerFTRL            EmbeddingOptimizer = 5
	OptimizerAdam            EmbeddingOptimizer = 6
	OptimizerMomentum        EmbeddingOptimizer = 8
	OptimizerRMSProp         EmbeddingOptimizer = 9
	OptimizerCenteredRMSProp EmbeddingOptimizer = 10
	OptimizerAdadelta        EmbeddingOptimizer = 12
	OptimizerProximalAdagrad EmbeddingOptimizer = 14
	OptimizerAdagradMomentum EmbeddingOptimizer = 26
)

func (o EmbeddingOptimizer) String() string {
	switch o {
	case OptimizerAdagrad:
		return "Adagrad"
	case OptimizerSGD:
		return "SGD"
	case OptimizerFTRL:
		return "FTRL"
	case OptimizerAdam:
		return "Adam"
	case OptimizerMomentum:
		return "Momentum"
	case OptimizerRMSProp:
		return "RMSProp"
	case OptimizerCenteredRMSProp:
		return "CenteredRMSProp"
	case OptimizerAdadelta:
		return "Adadelta"
	case OptimizerProximalAdagrad:
		return "ProximalAdagrad"
	case OptimizerAdagradMomentum:
		return "AdagradMomentum"
	}
	return fmt.Sprintf("EmbeddingOptimizer(%d)", int(o))
}

// EmbeddingCombiner is how a sample's rows combine (TensorFlow's combiners). A sample
// without ids gets zeros.
type EmbeddingCombiner int

// The combiners; the zero value is CombinerSum.
const (
	// CombinerSum: the sum of weight * row.
	CombinerSum EmbeddingCombiner = 0
	// CombinerMean: that sum divided by the sum of the weights.
	CombinerMean EmbeddingCombiner = 1
	// CombinerSqrtN: that sum divided by the square root of the sum of squared weights.
	CombinerSqrtN EmbeddingCombiner = 2
)

func (c EmbeddingCombiner) String() string {
	switch c {
	case CombinerSum:
		return "sum"
	case CombinerMean:
		return "mean"
	case CombinerSqrtN:
		return "sqrtn"
	}
	return fmt.Sprintf("EmbeddingCombiner(%d)", int(c))
}

// EmbeddingMode is TPUEmbeddingConfiguration.Mode: Inference refuses gradients,
// BackwardPassOnly activations (ErrFailedPrecondition naming the mode).
type EmbeddingMode int

// The modes.
const (
	EmbeddingModeUnspecified      EmbeddingMode = 0
	EmbeddingModeInference        EmbeddingMode = 1
	EmbeddingModeTraining         EmbeddingMode = 2
	EmbeddingModeBackwardPassOnly EmbeddingMode = 3
)

func (m EmbeddingMode) String() string {
	switch m {
	case EmbeddingModeUnspecified:
		return "UNSPECIFIED"
	case EmbeddingModeInference:
		return "INFERENCE"
	case EmbeddingModeTraining:
		return "TRAINING"
	case EmbeddingModeBackwardPassOnly:
		return "BACKWARD_PASS_ONLY"
	}
	return fmt.Sprintf("EmbeddingMode(%d)", int(m))
}

// EmbeddingConfigFromJSON is a serialized TPUEmbeddingConfiguration (for
// SystemOptions.EmbeddingConfig) from its proto3 JSON form, with each table's
// optimization_parameters as an object. What is wrong is an ErrInvalidArgument
// naming its path ("table_descriptor[0].dimension: ...").
func EmbeddingConfigFromJSON(json string) ([]byte, error) {
	return try(func() []byte { return byteSlice(RawEmbeddingConfigFromJson(json)) })
}

// EmbeddingTable is one table of the system's configuration.
type EmbeddingTable struct {
	Name           string
	VocabularySize int64
	Dimension      int
	Optimizer      EmbeddingOptimizer
	// Variables: "parameters" (the rows), then the optimizer's slots by TensorFlow's
	// names ("accumulators" for Adagrad, ...).
	Variables []string
}

// EmbeddingFeature is one feature of the system's configuration: it looks up Table,
// and its activation has Shape (input_shape + [dimension]).
type EmbeddingFeature struct {
	Name  string
	Table int
	Shape []int64
}

// Samples is the feature's sample count per participant: the product of all of
// Shape but the last.
func (f EmbeddingFeature) Samples() int64 {
	n := int64(1)
	if len(f.Shape) == 0 {
		return 0
	}
	for _, d := range f.Shape[:len(f.Shape)-1] {
		n *= d
	}
	return n
}

// systemCall runs one query of the raw system, its failure as an error.
func systemCall[T any](s *System, call func(RawTpuSystem) T) (T, error) {
	raw, err := s.handle()
	if err != nil {
		var zero T
		return zero, err
	}
	return try(func() T { return call(raw) })
}

// EmbeddingMode is the configuration's mode (EmbeddingModeUnspecified without one).
func (s *System) EmbeddingMode() (EmbeddingMode, error) {
	m, err := systemCall(s, RawTpuSystem.EmbeddingMode)
	return EmbeddingMode(m), err
}

// EmbeddingNumTables is the number of tables (0 without an embedding configuration).
func (s *System) EmbeddingNumTables() (int, error) {
	return systemCall(s, RawTpuSystem.EmbeddingNumTables)
}

// EmbeddingTableIndex is the index of the table called name (ErrNotFound naming it).
func (s *System) EmbeddingTableIndex(name string) (int, error) {
	return systemCall(s, func(r RawTpuSystem) int { return r.EmbeddingTableIndex(name) })
}

// EmbeddingTableName is table's name; an index outside [0, EmbeddingNumTables()) is
// ErrOutOfRange, here and in every method taking a table or feature.
func (s *System) EmbeddingTableName(table int) (string, error) {
	return systemCall(s, func(r RawTpuSystem) string { return r.EmbeddingTableName(table) })
}

// EmbeddingVocabularySize is table's row count.
func (s *System) EmbeddingVocabularySize(table int) (int64, error) {
	return systemCall(s, func(r RawTpuSystem) int64 { return r.EmbeddingVocabularySize(table) })
}

// EmbeddingDimension is the length of table's rows.
func (s *System) EmbeddingDimension(table int) (int, error) {
	return systemCall(s, func(r RawTpuSystem) int { return r.EmbeddingDimension(table) })
}

// EmbeddingTableOptimizer is table's optimizer.
func (s *System) EmbeddingTableOptimizer(table int) (EmbeddingOptimizer, error) {
	o, err := systemCall(s, func(r RawTpuSystem) TpurtEmbeddingOptimizer { return r.EmbeddingTableOptimizer(table) })
	return EmbeddingOptimizer(o), err
}

// EmbeddingNumVariables is table's variable count: the parameters and the slots.
func (s *System) EmbeddingNumVariables(table int) (int, error) {
	return systemCall(s, func(r RawTpuSystem) int { return r.EmbeddingNumVariables(table) })
}

// EmbeddingVariableName is the name of table's variable (0 is "parameters").
func (s *System) EmbeddingVariableName(table, variable int) (string, error) {
	return systemCall(s, func(r RawTpuSystem) string { return r.EmbeddingVariableName(table, variable) })
}

// EmbeddingVariableIndex is the index of table's variable called name; a name the
// table lacks is ErrNotFound naming it, the table and the names it has.
func (s *System) EmbeddingVariableIndex(table int, name string) (int, error) {
	n, err := s.EmbeddingNumVariables(table)
	if err != nil {
		return 0, err
	}
	names := make([]string, n)
	for v := range names {
		if names[v], err = s.EmbeddingVariableName(table, v); err != nil {
			return 0, err
		}
		if names[v] == name {
			return v, nil
		}
	}
	tableName, err := s.EmbeddingTableName(table)
	if err != nil {
		return 0, err
	}
	return 0, newError(CodeNotFound, "table '%s' has no variable %q (it has %s)", tableName, name, strings.Join(names, ", "))
}

// EmbeddingRowOwner says where row of table lives: the global core holding its shard
// (task core / cores per task) and its row in that shard. A row outside
// [0, vocabulary size) is ErrOutOfRange.
func (s *System) EmbeddingRowOwner(table int, row int64) (core int, shardRow int64, err error) {
	if core, err = systemCall(s, func(r RawTpuSystem) int { return r.EmbeddingRowCore(table, row) }); err != nil {
		return 0, 0, err
	}
	shardRow, err = systemCall(s, func(r RawTpuSystem) int64 { return r.EmbeddingShardRow(table, row) })
	return core, shardRow, err
}

// EmbeddingTable describes table.
func (s *System) EmbeddingTable(table int) (EmbeddingTable, error) {
	var t EmbeddingTable
	var err error
	if t.Name, err = s.EmbeddingTableName(table); err != nil {
		return t, err
	}
	if t.VocabularySize, err = s.EmbeddingVocabularySize(table); err != nil {
		return t, err
	}
	if t.Dimension, err = s.EmbeddingDimension(table); err != nil {
		return t, err
	}
	if t.Optimizer, err = s.EmbeddingTableOptimizer(table); err != nil {
		return t, err
	}
	n, err := s.EmbeddingNumVariables(table)
	if err != nil {
		return t, err
	}
	t.Variables = make([]string, n)
	for v := range t.Variables {
		if t.Variables[v], err = s.EmbeddingVariableName(table, v); err != nil {
			return t, err
		}
	}
	return t, nil
}

// EmbeddingTables describes every table, in the configuration's order.
func (s *System) EmbeddingTables() ([]EmbeddingTable, error) {
	n, err := s.EmbeddingNumTables()
	if err != nil {
		return nil, err
	}
	tables := make([]EmbeddingTable, n)
	for i := range tables {
		if tables[i], err = s.EmbeddingTable(i); err != nil {
			return nil, err
		}
	}
	return tables, nil
}

// EmbeddingNumFeatures is the number of features (0 without an embedding configuration).
func (s *System) EmbeddingNumFeatures() (int, error) {
	return systemCall(s, RawTpuSystem.EmbeddingNumFeatures)
}

// EmbeddingFeatureIndex is the index of the feature called name (ErrNotFound naming
// it); an older configuration's features are "<table>/<i>".
func (s *System) EmbeddingFeatureIndex(name string) (int, error) {
	return systemCall(s, func(r RawTpuSystem) int { return r.EmbeddingFeatureIndex(name) })
}

// EmbeddingFeatureName is feature's name.
func (s *System) EmbeddingFeatureName(feature int) (string, error) {
	return systemCall(s, func(r RawTpuSystem) string { return r.EmbeddingFeatureName(feature) })
}

// EmbeddingFeatureTable is the table feature looks up.
func (s *System) EmbeddingFeatureTable(feature int) (int, error) {
	return systemCall(s, func(r RawTpuSystem) int { return r.EmbeddingFeatureTable(feature) })
}

// EmbeddingFeatureShape is the shape of feature's activation, input_shape + [dimension].
func (s *System) EmbeddingFeatureShape(feature int) ([]int64, error) {
	return systemCall(s, func(r RawTpuSystem) []int64 { return int64Slice(r.EmbeddingFeatureShape(feature)) })
}

// EmbeddingFeature describes feature.
func (s *System) EmbeddingFeature(feature int) (EmbeddingFeature, error) {
	var f EmbeddingFeature
	var err error
	if f.Name, err = s.EmbeddingFeatureName(feature); err != nil {
		return f, err
	}
	if f.Table, err = s.EmbeddingFeatureTable(feature); err != nil {
		return f, err
	}
	f.Shape, err = s.EmbeddingFeatureShape(feature)
	return f, err
}

// EmbeddingFeatures describes every feature, in the configuration's order (the
// indices EmbeddingFeatureBatch.Feature and the activations use).
func (s *System) EmbeddingFeatures() ([]EmbeddingFeature, error) {
	n, err := s.EmbeddingNumFeatures()
	if err != nil {
		return nil, err
	}
	features := make([]EmbeddingFeature, n)
	for i := range features {
		if features[i], err = s.EmbeddingFeature(i); err != nil {
			return nil, err
		}
	}
	return features, nil
}

// EmbeddingLoad writes rows [firstRow, firstRow+numRows) of table's variable from
// values, row-major (numRows * dimension floats; another count is an
// ErrInvalidArgument, a range outside the table ErrOutOfRange). In a multi-task
// system it writes the rows held here (every task loads the same values). It waits
// for the step in flight; from inside a computation it is ErrFailedPrecondition.
func (s *System) EmbeddingLoad(table, variable int, firstRow, numRows int64, values []float32) error {
	raw, err := s.handle()
	if err != nil {
		return err
	}
	return try0(func() { raw.EmbeddingLoadFloats(table, variable, firstRow, numRows, values) })
}

// EmbeddingRetrieveInto reads rows [firstRow, firstRow+numRows) of table's variable
// into out, which holds exactly numRows * dimension floats (else ErrInvalidArgument).
// In a multi-task system the rows other tasks hold keep out's values.
func (s *System) EmbeddingRetrieveInto(table, variable int, firstRow, numRows int64, out []float32) error {
	raw, err := s.handle()
	if err != nil {
		return err
	}
	return try0(func() { raw.EmbeddingRetrieveInto(table, variable, firstRow, numRows, out) })
}

// EmbeddingRetrieve is EmbeddingRetrieveInto a new slice; rows other tasks hold are NaN.
func (s *System) EmbeddingRetrieve(table, variable int, firstRow, numRows int64) ([]float32, error) {
	dim, err := s.EmbeddingDimension(table)
	if err != nil {
		return nil, err
	}
	n := numRows * int64(dim)
	if n < 0 {
		n = 0 // the library names the bad row count
	}
	out := make([]float32, n)
	nan := float32(math.NaN())
	for i := range out {
		out[i] = nan
	}
	if err := s.EmbeddingRetrieveInto(table, variable, firstRow, numRows, out); err != nil {
		return nil, err
	}
	return out, nil
}

// embeddingVariable resolves a table and a variable by name.
func (s *System) embeddingVariable(table, variable string) (int, int, error) {
	t, err := s.EmbeddingTableIndex(table)
	if err != nil {
		return 0, 0, err
	}
	v, err := s.EmbeddingVariableIndex(t, variable)
	return t, v, err
}

// EmbeddingLoadByName is EmbeddingLoad of the table and variable with those names
// (e.g. "video", "accumulators"); an unknown name is ErrNotFound naming it.
func (s *System) EmbeddingLoadByName(table, variable string, firstRow, numRows int64, values []float32) error {
	t, v, err := s.embeddingVariable(table, variable)
	if err != nil {
		return err
	}
	return s.EmbeddingLoad(t, v, firstRow, numRows, values)
}

// EmbeddingRetrieveByName is EmbeddingRetrieve of the table and variable with those names.
func (s *System) EmbeddingRetrieveByName(table, variable string, firstRow, numRows int64) ([]float32, error) {
	t, v, err := s.embeddingVariable(table, variable)
	if err != nil {
		return nil, err
	}
	return s.EmbeddingRetrieve(t, v, firstRow, numRows)
}

// EmbeddingFeatureBatch is one feature's ids for one participant's batch (of the
// feature's Samples()): COO with SampleIndices (the sample of each id, any order), or
// ragged with RowSplits (Samples()+1 offsets from 0 to len(IDs); sample b owns
// IDs[RowSplits[b]:RowSplits[b+1]]). A feature without ids may give neither. Weights:
// one per id, nil for every weight 1. A sample's rows combine in the order of IDs.
type EmbeddingFeatureBatch struct {
	Feature int // index into the configuration's features (EmbeddingFeatureIndex)
	// FeatureName, if set, names the feature instead (then Feature must be 0 or its index).
	FeatureName   string
	IDs           []int64
	SampleIndices []int64
	RowSplits     []int64
	Weights       []float32
	Combiner      EmbeddingCombiner
}

func floatVector(values []float32) FloatVector {
	v := NewFloatVector()
	for _, x := range values {
		v.Add(x)
	}
	return v
}

func (b EmbeddingFeatureBatch) raw() RawEmbeddingFeatureBatch {
	r := NewRawEmbeddingFeatureBatch()
	r.SetFeature(b.Feature)
	for _, set := range []struct {
		values []int64
		to     func(Int64Vector)
	}{{b.IDs, r.SetIds}, {b.SampleIndices, r.SetSampleIndices}, {b.RowSplits, r.SetRowSplits}} {
		v := int64Vector(set.values)
		set.to(v)
		DeleteInt64Vector(v)
	}
	w := floatVector(b.Weights)
	r.SetWeights(w)
	DeleteFloatVector(w)
	r.SetCombiner(TpurtEmbeddingCombiner(b.Combiner))
	return r
}

// EmbeddingEnqueue gives this participant's sparse input for the step, each feature
// at most once; once per participant per step, before EmbeddingRecvActivations. A bad
// feature, id, sample index, row split, combiner or weight is an ErrInvalidArgument
// naming the feature, table and value; returned from the computation, it fails the
// step and no row changes.
func (c *Context) EmbeddingEnqueue(features ...EmbeddingFeatureBatch) error {
	v := NewEmbeddingFeatureBatchVector()
	defer DeleteEmbeddingFeatureBatchVector(v)
	for i, f := range features {
		if f.FeatureName != "" {
			index, err := c.EmbeddingFeatureIndex(f.FeatureName)
			if err != nil {
				return err
			}
			if f.Feature != 0 && f.Feature != index {
				return newError(CodeInvalidArgument, "features[%d] names feature %q (%d) and feature %d", i, f.FeatureName, index, f.Feature)
			}
			f.Feature = index
		}
		r := f.raw()
		v.Add(r)
		DeleteRawEmbeddingFeatureBatch(r)
	}
	return try0(func() { c.raw.EmbeddingEnqueue(v) })
}

// EmbeddingNumFeatures is the configuration's feature count, the length of the
// activations and of the gradients.
func (c *Context) EmbeddingNumFeatures() (int, error) { return try(c.raw.EmbeddingNumFeatures) }

// EmbeddingFeatureIndex is the index of the feature called name (ErrNotFound naming it).
func (c *Context) EmbeddingFeatureIndex(name string) (int, error) {
	return try(func() int { return c.raw.EmbeddingFeatureIndex(name) })
}

// EmbeddingFeatureName is feature's name (ErrOutOfRange outside the configuration).
func (c *Context) EmbeddingFeatureName(feature int) (string, error) {
	return try(func() string { return c.raw.EmbeddingFeatureName(feature) })
}

// EmbeddingRecvActivations are this participant's activations, one per configured
// feature: a float32 tensor of the feature's shape for an enqueued feature, nil for
// the others. A collective: every participant calls it once per step it enqueues
// in. The tensors belong to the step (closed when the computation returns; return
// one as an output to keep it).
func (c *Context) EmbeddingRecvActivations() ([]*Tensor, error) {
	v, err := try(c.raw.EmbeddingRecvActivations)
	if err != nil {
		return nil, err
	}
	defer DeleteTensorVector(v)
	out := make([]*Tensor, v.Size())
	for i := range out {
		if t := v.Get(i); !t.IsNull() {
			out[i] = wrapTensor(NewRawTensor__SWIG_1(t))
			c.owned = append(c.owned, out[i])
		}
	}
	return out, nil
}

// EmbeddingRecvActivationsByName is EmbeddingRecvActivations keyed by feature name,
// the enqueued features only.
func (c *Context) EmbeddingRecvActivationsByName() (map[string]*Tensor, error) {
	activations, err := c.EmbeddingRecvActivations()
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*Tensor)
	for i, a := range activations {
		if a == nil {
			continue
		}
		name, err := c.EmbeddingFeatureName(i)
		if err != nil {
			return nil, err
		}
		byName[name] = a
	}
	return byName, nil
}

// EmbeddingSendGradientsByName is EmbeddingSendGradients with the gradients keyed by
// feature name (a name not in the configuration is ErrNotFound naming it).
func (c *Context) EmbeddingSendGradientsByName(gradients map[string]*Tensor, learningRates []float32) error {
	n, err := c.EmbeddingNumFeatures()
	if err != nil {
		return err
	}
	list := make([]*Tensor, n)
	for name, g := range gradients {
		i, err := c.EmbeddingFeatureIndex(name)
		if err != nil {
			return err
		}
		list[i] = g
	}
	return c.EmbeddingSendGradients(list, learningRates)
}

// EmbeddingSendGradients sends the gradients of this participant's activations, one
// per configured feature (nil for a feature not enqueued), and the dynamic learning
// rates by tag (exactly as many as the configuration's distinct tags; nil if none;
// every participant gives the same). The rows are updated when the step has
// succeeded on every task. A collective: every participant calls it once, after
// EmbeddingRecvActivations.
func (c *Context) EmbeddingSendGradients(gradients []*Tensor, learningRates []float32) error {
	v := NewTensorVector()
	defer DeleteTensorVector(v)
	for i, g := range gradients {
		if g == nil {
			empty := NewRawTensor__SWIG_0()
			v.Add(empty)
			DeleteRawTensor(empty)
			continue
		}
		raw, err := g.handle()
		if err != nil {
			return newError(CodeInvalidArgument, "gradients[%d]: %v", i, err.(*Error).Message)
		}
		v.Add(raw)
	}
	rates := floatVector(learningRates)
	defer DeleteFloatVector(rates)
	return try0(func() { c.raw.EmbeddingSendGradients(v, rates) })
}
