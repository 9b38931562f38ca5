// Data-parallel linear regression with tpurt from Go: the same data, model and
// update as tools/tpurt/demo.c. Each replica trains on its share of the rows (8
// replicas: 512); every SGD step sums the 10 local sums (9 gradient sums, the loss)
// with one CrossReplicaSum. The system starts with InitializeTPUSystem(nil, ...): under
// `tpurt launch` the replicas are the cores of all tasks and each task runs and
// reports its own.
package main

import (
	"fmt"
	"math"
	"os"

	"tpurt.dev/go/tpurt"
)

const (
	samples      = 4096
	features     = 8
	params       = features + 1 // weights, then the bias
	sums         = params + 1   // gradient sums, then the loss sum
	steps        = 100
	learningRate = float32(0.1)
	defaultCores = 8
	tolerance    = 1e-3
)

var trueWeights = [features]float64{0.5, -1.25, 2.0, 0.75, -0.3, 1.5, -2.2, 0.1}

const trueBias = 0.7

// uniform is demo.c's fixed-seed LCG (Knuth's MMIX constants): uniform in [-1, 1).
func uniform(state *uint64) float64 {
	*state = *state*6364136223846793005 + 1442695040888963407
	return float64(*state>>11)/float64(uint64(1)<<52) - 1.0
}

// makeData: standardized features and y = X w* + b* + noise, exactly as demo.c.
func makeData() ([]float32, []float32) {
	raw := make([][features]float64, samples)
	state := uint64(42)
	for i := range raw {
		for f := 0; f < features; f++ {
			raw[i][f] = uniform(&state)*float64(f+1) + float64(f)
		}
	}
	x := make([]float32, samples*features)
	for f := 0; f < features; f++ {
		mean, variance := 0.0, 0.0
		for i := range raw {
			mean += raw[i][f]
		}
		mean /= samples
		for i := range raw {
			variance += (raw[i][f] - mean) * (raw[i][f] - mean)
		}
		sd := math.Sqrt(variance / samples)
		for i := range raw {
			x[i*features+f] = float32((raw[i][f] - mean) / sd)
		}
	}
	y := make([]float32, samples)
	for i := range y {
		v := trueBias + 0.01*uniform(&state)
		for f := 0; f < features; f++ {
			v += trueWeights[f] * float64(x[i*features+f])
		}
		y[i] = float32(v)
	}
	return x, y
}

// solveNormalEquations: (A^T A) p = A^T y with A = [X 1], Gaussian elimination with
// partial pivoting in float64.
func solveNormalEquations(x, y []float32) [params]float64 {
	var m [params][params + 1]float64
	for i := 0; i < samples; i++ {
		var a [params]float64
		for f := 0; f < features; f++ {
			a[f] = float64(x[i*features+f])
		}
		a[features] = 1
		for r := 0; r < params; r++ {
			for c := 0; c < params; c++ {
				m[r][c] += a[r] * a[c]
			}
			m[r][params] += a[r] * float64(y[i])
		}
	}
	for col := 0; col < params; col++ {
		pivot := col
		for r := col + 1; r < params; r++ {
			if math.Abs(m[r][col]) > math.Abs(m[pivot][col]) {
				pivot = r
			}
		}
		m[col], m[pivot] = m[pivot], m[col]
		for r := col + 1; r < params; r++ {
			factor := m[r][col] / m[col][col]
			for c := col; c <= params; c++ {
				m[r][c] -= factor * m[col][c]
			}
		}
	}
	var p [params]float64
	for r := params - 1; r >= 0; r-- {
		v := m[r][params]
		for c := r + 1; c < params; c++ {
			v -= m[r][c] * p[c]
		}
		p[r] = v / m[r][r]
	}
	return p
}

func run() error {
	x, y := makeData()
	exact := solveNormalEquations(x, y)

	// TPURT_NUM_CORES (tpurt launch --cores-per-task) wins over the default.
	cores := defaultCores
	if _, set := os.LookupEnv("TPURT_NUM_CORES"); set {
		cores = 0
	}
	system, err := tpurt.InitializeTPUSystem(nil, tpurt.SystemOptions{NumCores: cores}, tpurt.ClusterOptions{})
	if err != nil {
		return err
	}
	defer system.Close()
	local, err := system.NumCores()
	if err != nil {
		return err
	}
	tasks, err := system.NumTasks()
	if err != nil {
		return err
	}
	task, err := system.TaskID()
	if err != nil {
		return err
	}
	replicas, first := local*tasks, task*local
	if samples%replicas != 0 {
		return fmt.Errorf("%d replicas do not divide the %d samples evenly", replicas, samples)
	}

	rows := samples / replicas
	inputs := make([][]*tpurt.Tensor, replicas)
	for r := range inputs {
		xs, err := tpurt.NewTensor([]int64{int64(rows), features}, x[r*rows*features:(r+1)*rows*features])
		if err != nil {
			return err
		}
		ys, err := tpurt.NewTensor([]int64{int64(rows)}, y[r*rows:(r+1)*rows])
		if err != nil {
			return err
		}
		inputs[r] = []*tpurt.Tensor{xs, ys}
	}

	trained := make([][params]float32, replicas)
	losses := make([]float32, steps)
	train := func(ctx *tpurt.Context, in []*tpurt.Tensor) ([]*tpurt.Tensor, error) {
		k := ctx.ReplicaID()
		xr, err := tpurt.Values[float32](in[0])
		if err != nil {
			return nil, err
		}
		yr, err := tpurt.Values[float32](in[1])
		if err != nil {
			return nil, err
		}
		p := &trained[k]
		for step := 0; step < steps; step++ {
			local := make([]float32, sums)
			for i := range yr {
				xi := xr[i*features : (i+1)*features]
				e := p[features] - yr[i]
				for f := 0; f < features; f++ {
					e += p[f] * xi[f]
				}
				for f := 0; f < features; f++ {
					local[f] += e * xi[f]
				}
				local[features] += e
				local[params] += e * e
			}
			global, err := tpurt.CrossReplicaSum(ctx, local)
			if err != nil {
				return nil, err
			}
			// d/dp of mean((Ap - y)^2) = 2/N * sum(err * a) over the global batch.
			for j := 0; j < params; j++ {
				p[j] -= learningRate * 2.0 * global[j] / samples
			}
			if k == 0 {
				losses[step] = global[params] / samples
			}
		}
		return nil, nil
	}
	if _, err := tpurt.Replicate(system, train, inputs); err != nil {
		return err
	}

	fmt.Printf("tpurt Go example: linear regression, %d samples x %d features over %d replicas, %d SGD steps\n",
		samples, features, replicas, steps)
	if tasks > 1 {
		fmt.Printf("task %d of %d runs replicas %d to %d\n", task, tasks, first, first+local-1)
	}
	if task == 0 { // replica 0, which records the loss, is task 0's
		fmt.Printf("loss: step 0 %.8f, step %d %.8f\n", losses[0], steps-1, losses[steps-1])
	}
	maxDiff := 0.0
	for j := 0; j < params; j++ {
		name := "b"
		if j < features {
			name = fmt.Sprintf("w[%d]", j)
		}
		diff := math.Abs(float64(trained[first][j]) - exact[j])
		if !(diff <= maxDiff) {
			maxDiff = diff // NaN sticks
		}
		fmt.Printf("%-6s trained %10.6f  closed form %10.6f  |diff| %.2e\n", name, trained[first][j], exact[j], diff)
	}
	for r := first + 1; r < first+local; r++ { // this task's replicas
		if trained[r] != trained[first] {
			return fmt.Errorf("replica %d ended with different weights", r)
		}
	}
	fmt.Printf("least-squares reference: max |diff| = %.2e (tolerance %.0e)\n", maxDiff, tolerance)
	if maxDiff > tolerance || math.IsNaN(maxDiff) {
		return fmt.Errorf("max |diff| %.2e is outside the tolerance %.0e", maxDiff, tolerance)
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "example failed:", err)
		os.Exit(1)
	}
	fmt.Println("example: OK")
}
