package accel_test

// The helpers around the training step on two ranks under `accel launch -n 2` (one launch):
// FindExecutableBatchSize agreeing across ranks, LocalSGD, the per-process helpers and
// LocalMainProcessFirst. The ranks are this test binary (runRole's "step_tools").

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

func TestStepToolsOnTwoRanks(t *testing.T) {
	out := run(t, self(t, 2, "step_tools", "ACCEL_GO_OUT="+t.TempDir()))
	// Rank 1 runs out of memory above 20, rank 0 above 40: every rank retries at each size one
	// of them could not run, and both go on with 19.
	tried := "128 115 103 92 82 73 65 58 52 46 41 36 32 28 25 22 19"
	expectLine(t, out, "rank 0: batch size 19 after "+tried)
	expectLine(t, out, "rank 1: batch size 19 after "+tried)
	// Five steps, averaging every two: after steps 2 and 4 and at the end.
	for rank := range 2 {
		expectLine(t, out, fmt.Sprintf("rank %d: LocalSGD averaged 3 times; "+
			"parameters apart before the end: true, equal after it: true", rank))
	}
	expectLine(t, out, "rank 0: last false; ran [main local-main process-0]")
	expectLine(t, out, "rank 1: last true; ran [last process-1]")
	expectLine(t, out, "rank 1: the local main process's file was there first: true")
}

// rankStepTools is one rank of TestStepToolsOnTwoRanks.
func rankStepTools() error {
	acc, err := accel.New(nil)
	if err != nil {
		return err
	}
	defer acc.Close()
	rank, err := acc.ProcessIndex()
	if err != nil {
		return err
	}
	limit := int64(40)
	if rank == 1 {
		limit = 20
	}
	var tried []string
	size, err := acc.FindExecutableBatchSize(accel.DefaultStartingBatchSize, func(n int64) error {
		tried = append(tried, fmt.Sprint(n))
		if n > limit {
			return fmt.Errorf("rank %d cannot hold %d: %w", rank, n, accel.ErrOutOfMemory)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("rank %d: batch size %d after %s\n", rank, size, strings.Join(tried, " "))
	if err := localSGDOnTwoRanks(acc, rank); err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	if err := perProcessHelpers(acc, rank); err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	return acc.WaitForEveryone()
}

// localSGDOnTwoRanks trains a linear regression on data of each rank's own for 5 SGD steps
// under LocalSGD with local_sgd_steps 2: the parameters part after the last step (the
// gradients were not synchronised) and End's average brings them together again.
func localSGDOnTwoRanks(acc *accel.Accelerator, rank int) error {
	if err := acc.SetSeed(3, false); err != nil {
		return err
	}
	model, err := accel.NewModel()
	if err != nil {
		return err
	}
	defer model.Close()
	if err := model.AddLayer("fc", "linear", "in_features=4 out_features=1"); err != nil {
		return err
	}
	if err := model.Define("def loss(self, x, y):\n    return torch.mse_loss(self.fc.forward(x), y)\n"); err != nil {
		return err
	}
	opt, err := accel.NewOptimizer(model, "sgd")
	if err != nil {
		return err
	}
	defer opt.Close()
	if err := opt.Set("lr", 0.1); err != nil {
		return err
	}
	if err := acc.Prepare(model, opt); err != nil {
		return err
	}
	l, err := accel.NewLocalSGD(acc, model, 2)
	if err != nil {
		return err
	}
	defer l.Close()
	for step := range 5 {
		xs, ys := make([]float32, 8), make([]float32, 2)
		for i := range xs {
			xs[i] = float32(math.Sin(float64(1 + rank*7 + step*3 + i)))
		}
		for i := range ys {
			ys[i] = float32(math.Cos(float64(rank + step*2 + i)))
		}
		if err := localStep(acc, model, opt, xs, ys); err != nil {
			return err
		}
		if err := l.Step(); err != nil {
			return err
		}
	}
	apart := parametersAgree(acc, model) != nil
	if err := l.End(); err != nil {
		return err
	}
	if err := l.End(); err != nil { // a second end does nothing
		return err
	}
	averages, err := l.AverageCount()
	if err != nil {
		return err
	}
	equal := parametersAgree(acc, model) == nil
	fmt.Printf("rank %d: LocalSGD averaged %d times; parameters apart before the end: %v, equal after it: %v\n",
		rank, averages, apart, equal)
	return nil
}

func localStep(acc *accel.Accelerator, model *accel.Model, opt *accel.Optimizer, xs, ys []float32) error {
	var s accel.Scope
	defer s.Close()
	x, err := s.Tensor(accel.FromSlice(xs, 2, 4))
	if err != nil {
		return err
	}
	y, err := s.Tensor(accel.FromSlice(ys, 2, 1))
	if err != nil {
		return err
	}
	loss, err := s.Tensor(model.Call("loss", x, y))
	if err != nil {
		return err
	}
	return errors.Join(acc.Backward(loss), opt.Step(), opt.ZeroGrad())
}

// perProcessHelpers prints where the On* helpers ran, and checks that rank 1 (not its machine's
// local main process) enters LocalMainProcessFirst's block after rank 0 has left it.
func perProcessHelpers(acc *accel.Accelerator, rank int) error {
	last, err := acc.IsLastProcess()
	if err != nil {
		return err
	}
	var ran []string
	mark := func(name string) func() error {
		return func() error { ran = append(ran, name); return nil }
	}
	err = errors.Join(
		acc.OnMainProcess(mark("main")),
		acc.OnLocalMainProcess(mark("local-main")),
		acc.OnLastProcess(mark("last")),
		acc.OnProcess(0, mark("process-0")),
		acc.OnProcess(1, mark("process-1")))
	if err != nil {
		return err
	}
	fmt.Printf("rank %d: last %v; ran %v\n", rank, last, ran)
	file := filepath.Join(os.Getenv("ACCEL_GO_OUT"), "made-once")
	return acc.LocalMainProcessFirst(func() error {
		local, err := acc.IsLocalMainProcess()
		if err != nil || !local {
			_, statErr := os.Stat(file)
			fmt.Printf("rank %d: the local main process's file was there first: %v\n", rank, statErr == nil)
			return err
		}
		time.Sleep(200 * time.Millisecond) // the other rank would be here by now, did it not wait
		return os.WriteFile(file, []byte("made once"), 0o644)
	})
}
