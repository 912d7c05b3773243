package accel_test

// The XxxContext forms: a done context ends the wait (ErrCancelled with the context's error as
// its cause) and, for a dataloader, loses nothing; on two ranks, it ends a barrier a late peer
// holds up, leaving the process group unusable.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// slowFirstLoader: sample i is the float 10 i, and sample 0 takes a second on the worker.
func slowFirstLoader(t *testing.T, acc *accel.Accelerator) *accel.DataLoader {
	ds := must(accel.DatasetFromFunc(4, []accel.Field{{DType: accel.F32}}, func(i int64, f [][]byte) error {
		if i == 0 {
			time.Sleep(time.Second)
		}
		binary.NativeEndian.PutUint32(f[0], math.Float32bits(10*float32(i)))
		return nil
	}))
	defer ds.Close()
	loader := must(accel.NewDataLoader(acc, ds))
	ok(t, loader.Set("batch_size", 1))
	ok(t, loader.Set("num_workers", 1))
	return loader
}

func firstValue(t *testing.T, next func() (accel.Batch, bool, error)) float32 {
	t.Helper()
	batch, more, err := next()
	ok(t, err)
	if !more {
		t.Fatal("the epoch ended early")
	}
	defer batch.Close()
	return must(accel.ToSlice[float32](batch[0]))[0]
}

func TestNextContextDeadlineEndsTheWaitAndLosesNoBatch(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	loader := slowFirstLoader(t, acc)
	defer loader.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := loader.NextContext(ctx)
	if took := time.Since(start); took > 900*time.Millisecond {
		t.Fatalf("NextContext returned after %v, past its 200 ms deadline", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, accel.ErrCancelled) {
		t.Fatalf("want ErrCancelled caused by the deadline, got %v", err)
	}
	if got := firstValue(t, func() (accel.Batch, bool, error) {
		return loader.NextContext(context.Background())
	}); got != 0 {
		t.Fatalf("after the deadline the first batch is sample %v, want 0", got/10)
	}
	if got := firstValue(t, loader.Next); got != 10 {
		t.Fatalf("the second batch is %v, want 10", got)
	}
}

func TestAContextDoneBeforeTheCallFailsItAtOnce(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := acc.WaitForEveryoneContext(ctx)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, accel.ErrCancelled) {
		t.Fatalf("want ErrCancelled caused by context.Canceled, got %v", err)
	}
	var none context.Context // a nil context is what is tested
	if err := acc.WaitForEveryoneContext(none); !errors.Is(err, accel.ErrInvalidArgument) {
		t.Fatalf("a nil context: want ErrInvalidArgument, got %v", err)
	}
	// Nothing stays interrupted: the same call with a live context works.
	ok(t, acc.WaitForEveryoneContext(context.Background()))
	if _, err := accel.NewContext(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("NewContext with a done context: want context.Canceled, got %v", err)
	}
}

func TestWaitForEveryoneContextOnTwoRanksEndsTheBarrierALatePeerHoldsUp(t *testing.T) {
	begin(t)
	out := run(t, self(t, 2, "context", "ACCEL_COLLECTIVE_TIMEOUT=20"))
	expectLine(t, out, "rank 0: deadline ended the barrier; then ACCEL_ERR_STATE")
}

// rankContext: rank 1 comes 3 s late; rank 0's barrier has a 300 ms deadline.
func rankContext() error {
	acc, err := accel.NewContext(context.Background(), nil)
	if err != nil {
		return err
	}
	defer acc.Close()
	if rank, _ := acc.ProcessIndex(); rank == 1 {
		time.Sleep(3 * time.Second)
		_ = acc.WaitForEveryone() // rank 0 gave up on it: the transport decides
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = acc.WaitForEveryoneContext(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, accel.ErrCancelled) {
		return fmt.Errorf("want ErrCancelled caused by the deadline, got %v", err)
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		return fmt.Errorf("the barrier returned after %v", took)
	}
	again := acc.WaitForEveryone()
	var e *accel.Error
	if !errors.As(again, &e) || e.Status != accel.ErrState {
		return fmt.Errorf("after an interrupted barrier: want ErrState, got %v", again)
	}
	fmt.Fprintln(os.Stdout, "rank 0: deadline ended the barrier; then", e.Status)
	return nil
}
