// A project of its own that depends on libaccel by README.md's lines alone (tests/install):
// under `accel launch -n 2` the ranks gather their indices and rank 0 reports.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	// The whole job within a minute: the rendezvous and the gather give up when it passes.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acc, err := accel.NewContext(ctx, nil)
	if err != nil {
		return err
	}
	defer acc.Close()
	rank, err := acc.ProcessIndex()
	if err != nil {
		return err
	}
	world, err := acc.NumProcesses()
	if err != nil {
		return err
	}
	mine, err := accel.FromSlice([]int64{int64(rank)})
	if err != nil {
		return err
	}
	defer mine.Close()
	all, err := acc.GatherContext(ctx, mine)
	if err != nil {
		return err
	}
	defer all.Close()
	ranks, err := accel.ToSlice[int64](all)
	if err != nil {
		return err
	}
	for i, r := range ranks {
		if r != int64(i) || len(ranks) != world {
			return fmt.Errorf("rank %d gathered %v", rank, ranks)
		}
	}
	isMain, err := acc.IsMainProcess()
	if err != nil {
		return err
	}
	if isMain {
		fmt.Printf("downstream ok: libaccel %s, %d ranks\n", accel.Version(), world)
	}
	return nil
}
