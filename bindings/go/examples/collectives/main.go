// Command collectives is libaccel's runtime from Go: where am I, and every collective once.
//
//	go build -o collectives ./examples/collectives
//	accel launch -n 2 ./collectives
//
// Each rank contributes a tensor that depends on its rank; the main process prints what came
// back. Run alone it is a world of one and every collective is the identity. The same program as
// examples/c/collectives.c, line for line the same output.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

func printTensor(acc *accel.Accelerator, label string, t *accel.Tensor) error {
	shape, err := t.Shape()
	if err != nil {
		return err
	}
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.FormatInt(d, 10)
	}
	line := fmt.Sprintf("%-24s shape [%s] values", label, strings.Join(dims, ", "))
	if dtype, err := t.DType(); err == nil && dtype == accel.F32 {
		values, err := accel.ToSlice[float32](t)
		if err != nil {
			return err
		}
		for _, v := range values {
			line += " " + strconv.FormatFloat(float64(v), 'g', -1, 32) // C's %g for these values
		}
	}
	return acc.Print(line)
}

// must ends the program with the library's message when a call failed.
func must[T any](v T, err error) T {
	if err != nil {
		fmt.Fprintf(os.Stderr, "collectives failed: %v\n", err)
		os.Exit(1)
	}
	return v
}

func check(err error) { must(0, err) }

func main() {
	acc := must(accel.New(nil))
	defer acc.Close()
	// Every tensor below is made in s and closed with it at the end.
	var s accel.Scope
	defer s.Close()
	rank, world := must(acc.ProcessIndex()), must(acc.NumProcesses())
	check(acc.SetSeed(42, false))

	main := ""
	if must(acc.IsMainProcess()) {
		main = ", main process"
	}
	fmt.Printf("rank %d of %d (local rank %d) on %s%s\n", rank, world, must(acc.LocalProcessIndex()), must(acc.Device()), main)
	check(acc.WaitForEveryone())
	check(acc.Printf("distributed type %s, mixed precision %s, libaccel %s",
		must(acc.DistributedType()), must(acc.MixedPrecision()), accel.Version()))

	// gather: rank r contributes [r*10, r*10+1]; everyone gets [0, 1, 10, 11, ...].
	mine := must(s.Tensor(accel.FromSlice([]float32{float32(rank * 10), float32(rank*10 + 1)})))
	check(printTensor(acc, "gather", must(s.Tensor(acc.Gather(mine)))))

	// pad_across_processes: rank r holds r+1 ones; padded with -1 to the longest, then gathered.
	ones := make([]float32, min(rank+1, 16))
	for i := range ones {
		ones[i] = 1
	}
	padded := must(s.Tensor(acc.PadAcrossProcesses(must(s.Tensor(accel.FromSlice(ones))), 0, -1, false)))
	check(printTensor(acc, "pad + gather", must(s.Tensor(acc.Gather(padded)))))

	// reduce: sum and mean of (rank + 1).
	v := must(s.Tensor(accel.Scalar(float32(rank + 1))))
	check(printTensor(acc, "reduce sum of rank+1", must(s.Tensor(acc.Reduce(v, accel.Sum)))))
	check(printTensor(acc, "reduce mean of rank+1", must(s.Tensor(acc.Reduce(v, accel.Mean)))))

	// broadcast from the last rank: only it needs a tensor.
	var source *accel.Tensor
	if rank == world-1 {
		source = must(s.Tensor(accel.FromSlice([]float32{3.5, 4.5, 5.5})))
	}
	check(printTensor(acc, "broadcast from last rank", must(s.Tensor(acc.Broadcast(source, world-1)))))

	// gather_object: bytes of any length per rank.
	for i, b := range must(acc.GatherObject([]byte(fmt.Sprintf("hello from rank %d", rank)))) {
		check(acc.Printf("gather_object[%d]       \"%s\"", i, b))
	}
	check(acc.WaitForEveryone())
}
