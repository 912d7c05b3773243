package accel_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// squares fills sample i with x = [i, i*i] (f32) and y = i (i64).
func squares(calls *atomic.Int64) func(int64, [][]byte) error {
	return func(i int64, fields [][]byte) error {
		calls.Add(1)
		binary.NativeEndian.PutUint32(fields[0][0:], math.Float32bits(float32(i)))
		binary.NativeEndian.PutUint32(fields[0][4:], math.Float32bits(float32(i*i)))
		binary.NativeEndian.PutUint64(fields[1], uint64(i))
		return nil
	}
}

var squareFields = []accel.Field{{DType: accel.F32, Shape: []int64{2}}, {DType: accel.I64}}

// funcLoader is a dataloader over a function dataset of n samples with squareFields, batches of
// batch on workers threads. The dataset handle is closed at once: the loader keeps it.
func funcLoader(t *testing.T, acc *accel.Accelerator, n int64, fn func(int64, [][]byte) error, batch, workers int) *accel.DataLoader {
	t.Helper()
	data := must(accel.DatasetFromFunc(n, squareFields, fn))
	loader := must(accel.NewDataLoader(acc, data))
	data.Close()
	ok(t, loader.Set("batch_size", batch))
	ok(t, loader.Set("num_workers", workers))
	return loader
}

func TestFunctionDatasetsFillSamplesOnWorkers(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	var calls atomic.Int64
	loader := funcLoader(t, acc, 100, squares(&calls), 10, 3)
	defer loader.Close()
	ok(t, loader.Set("shuffle", true))
	seen := map[int64]bool{}
	for batch, err := range loader.All() {
		ok(t, err)
		x := must(accel.ToSlice[float32](batch[0]))
		y := must(accel.ToSlice[int64](batch[1]))
		for r, i := range y {
			if x[2*r] != float32(i) || x[2*r+1] != float32(i*i) {
				t.Fatalf("sample %d came as %v", i, x[2*r:2*r+2])
			}
			seen[i] = true
		}
	}
	if len(seen) != 100 || calls.Load() != 100 {
		t.Fatalf("%d distinct samples, %d calls", len(seen), calls.Load())
	}
	_, err := accel.DatasetFromFunc(10, nil, squares(&calls))
	wantStatus(t, err, accel.ErrInvalidArgument)
	_, err = accel.DatasetFromFunc(10, []accel.Field{{DType: accel.DType(77)}}, squares(&calls))
	wantStatus(t, err, accel.ErrDType, "77")
}

var errBadSample = errors.New("sample 13 is unreadable")

func TestAFunctionErrorComesBackFromNext(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	var calls atomic.Int64
	fill := squares(&calls)
	loader := funcLoader(t, acc, 40, func(i int64, f [][]byte) error {
		if i == 13 {
			return errBadSample
		}
		return fill(i, f)
	}, 4, 0)
	defer loader.Close()
	batches := 0
	var last error
	for _, err := range loader.All() {
		if err != nil {
			last = err
			break
		}
		batches++
	}
	wantStatus(t, last, accel.ErrCallback)
	if !errors.Is(last, errBadSample) || !strings.Contains(last.Error(), "sample 13 is unreadable") {
		t.Fatalf("the function's error is not the cause: %v", last)
	}
	if batches != 3 {
		t.Fatalf("%d batches before the failing one", batches)
	}
	// The next iteration starts the epoch again and fails at the same sample.
	batch, more, err := loader.Next()
	ok(t, err)
	if !more || must(accel.ToSlice[int64](batch[1]))[0] != 0 {
		t.Fatal("the epoch did not start again")
	}
	batch.Close()
}

func TestAPanicInADatasetFunctionOnAWorkerThreadIsAnError(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	var calls atomic.Int64
	fill := squares(&calls)
	loader := funcLoader(t, acc, 64, func(i int64, f [][]byte) error {
		if i == 37 {
			var m map[string]int
			m["boom"] = 1 // a real runtime panic: assignment to a nil map
		}
		return fill(i, f)
	}, 8, 2)
	defer loader.Close()
	var failure error
	for _, err := range loader.All() {
		if err != nil {
			failure = err
		}
	}
	wantStatus(t, failure, accel.ErrCallback)
	var p *accel.PanicError
	if !errors.As(failure, &p) || !strings.Contains(fmt.Sprint(p.Value), "nil map") {
		t.Fatalf("want the panic as the cause, got %v", failure)
	}
	var re runtime.Error
	if !errors.As(failure, &re) {
		t.Fatal("the runtime.Error the function panicked with is not reachable with errors.As")
	}
	if !strings.Contains(string(p.Stack), "concurrency_test.go") {
		t.Fatalf("the stack does not show where it panicked:\n%s", p.Stack)
	}
}

func TestCloseRacesWithARunningDataLoader(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	var calls atomic.Int64
	fill := squares(&calls)
	slow := func(i int64, f [][]byte) error {
		time.Sleep(200 * time.Microsecond)
		return fill(i, f)
	}
	for round := 0; round < 20; round++ {
		loader := funcLoader(t, acc, 1<<20, slow, 4, 2)
		done := make(chan error)
		go func() {
			var last error
			for {
				batch, more, err := loader.Next()
				if err != nil || !more {
					last = err
					break
				}
				batch.Close()
			}
			done <- last
		}()
		time.Sleep(time.Duration(round) * time.Millisecond)
		loader.Close() // from another goroutine, while Next runs
		err := <-done
		wantStatus(t, err, accel.ErrState, "after Close")
		// Once the running Next returned, the loader is freed: its workers call no more.
		settled := calls.Load()
		time.Sleep(20 * time.Millisecond)
		if calls.Load() != settled {
			t.Fatal("the dataset function ran after its dataloader was closed")
		}
	}
}

// 10,000 failing calls from 64 goroutines at once: each returns its own message, never another
// call's. The message is per OS thread in the library, and goroutines move between threads.
func TestEveryFailingCallGetsItsOwnMessage(t *testing.T) {
	begin(t)
	cfg := must(accel.NewConfig())
	defer cfg.Close()
	const goroutines, calls = 64, 157 // 64 x 157 = 10,048
	var wrong atomic.Int64
	var firstWrong atomic.Value
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := 0; c < calls; c++ {
				key := fmt.Sprintf("no_such_key_g%d_c%d", g, c)
				var err error
				status := accel.ErrConfig
				switch c % 3 {
				case 0:
					err = cfg.Set(key, 1)
				case 1:
					_, err = cfg.Get(key)
				default: // the tensor calls' own path (no closure; see fromData)
					status = accel.ErrInvalidArgument
					_, err = accel.FromSlice([]float32{1}, int64(g+1), int64(c+1))
					key = fmt.Sprintf("need %d bytes", 4*(g+1)*(c+1))
				}
				var e *accel.Error
				if !errors.As(err, &e) || e.Status != status || !namesKey(e.Message, key) {
					if wrong.Add(1) == 1 {
						firstWrong.Store(fmt.Sprintf("%s: %v", key, err))
					}
				}
				if c%16 == 0 {
					runtime.Gosched() // move between threads more often
				}
			}
		}()
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Fatalf("%d of %d calls got another message; first: %v", n, goroutines*calls, firstWrong.Load())
	}
}

// namesKey reports whether message names key itself (not a longer key that starts with it).
func namesKey(message, key string) bool {
	for rest := message; ; {
		at := strings.Index(rest, key)
		if at < 0 {
			return false
		}
		rest = rest[at+len(key):]
		if rest == "" || !(rest[0] >= '0' && rest[0] <= '9' || rest[0] == '_') {
			return true
		}
	}
}
