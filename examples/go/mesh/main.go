// Command mesh runs one step over a 2 x 2 mesh: 2 replicas ("batch") of 2 cores each
// ("model") on a system of 4 cores. Each replica's [4] vector is split over its 2
// cores; each core sums its half, and one sum over the mesh's "model" axis gives both
// cores their replica's total. It exits nonzero unless every core's total is right.
package main

import (
	"fmt"
	"os"

	"tpurt.dev/go/tpurt"
)

const replicas, coresPerReplica = 2, 2

func run() error {
	system, err := tpurt.NewSystem(tpurt.SystemOptions{NumCores: replicas * coresPerReplica})
	if err != nil {
		return err
	}
	defer system.Close()
	topology, err := system.Topology()
	if err != nil {
		return err
	}
	defer topology.Close()
	assignment, err := tpurt.BuildDeviceAssignment(topology, []int32{coresPerReplica, 1, 1, 1}, nil, replicas)
	if err != nil {
		return err
	}
	defer assignment.Close()
	mesh, err := tpurt.NewMesh(assignment, tpurt.MeshAxis{Name: "batch", Size: replicas}, tpurt.MeshAxis{Name: "model", Size: coresPerReplica})
	if err != nil {
		return err
	}
	defer mesh.Close()

	inputs := make([][]*tpurt.Tensor, replicas) // replica r: [10r+1, 10r+2, 10r+3, 10r+4]
	for r := range inputs {
		x, err := tpurt.NewTensor([]int64{4}, []float32{10*float32(r) + 1, 10*float32(r) + 2, 10*float32(r) + 3, 10*float32(r) + 4})
		if err != nil {
			return err
		}
		inputs[r] = []*tpurt.Tensor{x}
	}
	// Runs once per (replica, logical core); in[0] is this core's half.
	step := func(ctx *tpurt.Context, in []*tpurt.Tensor) ([]*tpurt.Tensor, error) {
		half, err := tpurt.Values[float32](in[0])
		if err != nil {
			return nil, err
		}
		partial, err := tpurt.NewTensor([]int64{1}, []float32{half[0] + half[1]})
		if err != nil {
			return nil, err
		}
		sum, err := ctx.CrossReplicaSumTensor(partial, tpurt.OverAxes(mesh, "model"))
		return []*tpurt.Tensor{sum}, err
	}
	halves := []int32{coresPerReplica} // cut in 2 along dimension 0 (in), joined back (out)
	outputs, err := tpurt.Replicate(system, step, inputs, tpurt.WithMesh(mesh), tpurt.WithNumOutputs(1),
		tpurt.WithInputPartitions(halves), tpurt.WithOutputPartitions(halves))
	if err != nil {
		return err
	}
	for r, out := range outputs {
		totals, err := tpurt.Values[float32](out[0]) // [core 0's total, core 1's total]
		if err != nil {
			return err
		}
		want := 40*float32(r) + 10
		fmt.Printf("replica %d: cores 0 and 1 got %g and %g (want %g)\n", r, totals[0], totals[1], want)
		if len(totals) != coresPerReplica || totals[0] != want || totals[1] != want {
			return fmt.Errorf("replica %d: totals %v, want %g on both cores", r, totals, want)
		}
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mesh:", err)
		os.Exit(1)
	}
}
