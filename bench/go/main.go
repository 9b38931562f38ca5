// The bindings' overhead benchmark (bench contract): 8 replicas on 8 cores; (a) an
// empty step, (b) one cross_replica_sum of a 1 MiB float32 input returned as output.
// Warm-up 20 steps, then each step timed alone; prints the medians in microseconds,
// for the default mode (replicas on the system's goroutines, "go") and for the
// callback mode (replicas as callbacks from the library's threads, "go-callback").
package main

import (
	"fmt"
	"os"
	"sort"
	"time"

	"tpurt.dev/go/tpurt"
)

const (
	replicas    = 8
	warmup      = 20
	emptySteps  = 200
	crsSteps    = 50
	crsElements = 262144 // 1 MiB of float32
)

func median(step func() error, n int) (float64, error) {
	for i := 0; i < warmup; i++ {
		if err := step(); err != nil {
			return 0, err
		}
	}
	times := make([]float64, n)
	for i := range times {
		start := time.Now()
		if err := step(); err != nil {
			return 0, err
		}
		times[i] = float64(time.Since(start).Nanoseconds()) / 1e3
	}
	sort.Float64s(times)
	if n%2 == 1 {
		return times[n/2], nil
	}
	return (times[n/2-1] + times[n/2]) / 2, nil
}

func run(name string, callbacks bool) error {
	system, err := tpurt.NewSystem(tpurt.SystemOptions{NumCores: replicas, CallbackReplicas: callbacks})
	if err != nil {
		return err
	}
	defer system.Close()

	empty := func(*tpurt.Context, []*tpurt.Tensor) ([]*tpurt.Tensor, error) { return nil, nil }
	emptyUs, err := median(func() error {
		_, err := tpurt.ReplicateN(system, empty, replicas)
		return err
	}, emptySteps)
	if err != nil {
		return err
	}

	inputs := make([][]*tpurt.Tensor, replicas)
	for r := range inputs {
		t, err := tpurt.Zeros(tpurt.Float32, []int64{crsElements})
		if err != nil {
			return err
		}
		inputs[r] = []*tpurt.Tensor{t}
	}
	sum := func(ctx *tpurt.Context, in []*tpurt.Tensor) ([]*tpurt.Tensor, error) {
		out, err := ctx.CrossReplicaSumTensor(in[0])
		return []*tpurt.Tensor{out}, err
	}
	crsUs, err := median(func() error {
		out, err := tpurt.Replicate(system, sum, inputs, tpurt.WithNumOutputs(1))
		for _, replica := range out {
			replica[0].Close()
		}
		return err
	}, crsSteps)
	if err != nil {
		return err
	}
	fmt.Printf("%s empty_step_us %.1f\n", name, emptyUs)
	fmt.Printf("%s crs_1mib_us %.1f\n", name, crsUs)
	return nil
}

func main() {
	for _, mode := range []struct {
		name      string
		callbacks bool
	}{{"go", false}, {"go-callback", true}} {
		if err := run(mode.name, mode.callbacks); err != nil {
			fmt.Fprintln(os.Stderr, "bench failed:", mode.name+":", err)
			os.Exit(1)
		}
	}
}
