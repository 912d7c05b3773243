// Command calls is the cost of one call through package accel, the Go row of the bindings' call
// bench (bench/calls.c is the C reference, with the same loops): a one-element tensor made and
// closed, an element-count query, and a sum of a one-element tensor across the processes.
//
//	go build -o calls ./bench/calls
//	accel launch -n 2 ./calls [iterations]
//
// Rank 0 prints one line per measure, in ns per call, the best of 5 repetitions after a warm-up.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

const repetitions = 5

func must[T any](v T, err error) T {
	if err != nil {
		fmt.Fprintf(os.Stderr, "calls bench failed: %v\n", err)
		os.Exit(1)
	}
	return v
}

func perCall(start time.Time, n int) float64 {
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

// createFree makes and closes a one-element tensor, the way a Go program does it.
func createFree(n int) float64 {
	start := time.Now()
	for i := 0; i < n; i++ {
		t := must(accel.FromSlice([]float32{float32(i)}))
		t.Close()
	}
	return perCall(start, n)
}

var sink int64

func query(t *accel.Tensor, n int) float64 {
	start := time.Now()
	for i := 0; i < n; i++ {
		sink += must(t.ElementCount())
	}
	return perCall(start, n)
}

func allreduce(acc *accel.Accelerator, t *accel.Tensor, n int) float64 {
	start := time.Now()
	for i := 0; i < n; i++ {
		must(acc.Reduce(t, accel.Sum)).Close()
	}
	return perCall(start, n)
}

func main() {
	n := 200000
	if len(os.Args) > 1 {
		n = must(strconv.Atoi(os.Args[1]))
	}
	nCollective := max(n/400, 1)
	// As a training loop: one OS thread for the library's per-thread pools (see accel.New).
	runtime.LockOSThread()
	acc := must(accel.New(nil))
	defer acc.Close()
	t := must(accel.FromSlice([]float32{1}))
	defer t.Close()
	// Warm-up: the allocator's caches, the collective's first connection.
	createFree(n / 10)
	query(t, n/10)
	allreduce(acc, t, nCollective/10+1)
	c, q, r := 1e300, 1e300, 1e300
	for range repetitions {
		c = min(c, createFree(n))
		q = min(q, query(t, n))
		r = min(r, allreduce(acc, t, nCollective))
	}
	if must(acc.ProcessIndex()) == 0 {
		fmt.Printf("create_free_ns %.1f\nquery_ns %.1f\nallreduce_ns %.1f\n", c, q, r)
	}
}
