package accel_test

import (
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// Every handle is an io.Closer (and a Batch too).
var (
	_ io.Closer = (*accel.Accelerator)(nil)
	_ io.Closer = (*accel.Config)(nil)
	_ io.Closer = (*accel.Tensor)(nil)
	_ io.Closer = (*accel.Model)(nil)
	_ io.Closer = (*accel.Optimizer)(nil)
	_ io.Closer = (*accel.Scheduler)(nil)
	_ io.Closer = (*accel.Dataset)(nil)
	_ io.Closer = (*accel.DataLoader)(nil)
	_ io.Closer = accel.Batch(nil)
)

// Close returns nil, also the second time and on nil; the handle is unusable afterwards.
func TestCloseIsIdempotentAndReturnsNil(t *testing.T) {
	begin(t)
	x := must(accel.FromSlice([]float32{1}))
	var closers []io.Closer
	closers = append(closers, must(accel.NewConfig()), x, must(accel.NewModel()),
		(*accel.Tensor)(nil), accel.Batch{x, nil})
	for _, c := range closers {
		for range 2 {
			if err := c.Close(); err != nil {
				t.Fatalf("%T.Close: %v", c, err)
			}
		}
	}
	_, err := x.ElementCount()
	wantStatus(t, err, accel.ErrState, "after Close")
}

// Tensors made, read and closed on many goroutines at once, each with its own value: no tensor is
// handed out twice or mixed with another (tensors share blocks; see tensor.go). Under -race too.
func TestTensorsFromManyGoroutines(t *testing.T) {
	begin(t)
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kept := make([]*accel.Tensor, 0, each)
			for i := range each {
				v := float32(g*each + i)
				x, err := accel.FromSlice([]float32{v})
				if err != nil {
					errs <- err
					return
				}
				kept = append(kept, x)
				if i%3 == 0 { // some closed at once, the others at the end
					kept = kept[:len(kept)-1]
					err = checkValue(x, v)
					x.Close()
					if err != nil {
						errs <- err
						return
					}
				}
			}
			for _, x := range kept {
				v, err := x.Float64()
				x.Close()
				if err == nil && (v < float64(g*each) || v >= float64((g+1)*each)) {
					err = fmt.Errorf("goroutine %d got another's tensor: %v", g, v)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func checkValue(x *accel.Tensor, want float32) error {
	n, err := x.ElementCount()
	if err != nil {
		return err
	}
	v, err := x.Float64()
	if err != nil {
		return err
	}
	if n != 1 || v != float64(want) {
		return fmt.Errorf("tensor of %d elements holding %v, want one holding %v", n, v, want)
	}
	return nil
}

// Every method of a handle returns an error last, the accelerator's place queries too: a nil or
// closed accelerator is an error, never a panic or a stale answer.
func TestPlaceQueriesFailOnANilOrClosedAccelerator(t *testing.T) {
	begin(t)
	var none *accel.Accelerator
	_, err := none.ProcessIndex()
	wantStatus(t, err, accel.ErrInvalidArgument, "nil *accel.Accelerator")
	_, err = none.IsMainProcess()
	wantStatus(t, err, accel.ErrInvalidArgument, "nil *accel.Accelerator")
	acc := must(accel.New(nil))
	if must(acc.NumProcesses()) != 1 {
		t.Fatal("a process alone is one of one")
	}
	ok(t, acc.Close())
	_, err = acc.NumProcesses()
	wantStatus(t, err, accel.ErrState, "after Close")
	_, err = acc.Device()
	wantStatus(t, err, accel.ErrState, "after Close")
}

// A handle's zero value (not made by its constructor) is an error naming that, never a NULL
// passed on to the library.
func TestAZeroHandleIsAnError(t *testing.T) {
	begin(t)
	var m accel.Model
	_, err := m.ParameterElementCount()
	wantStatus(t, err, accel.ErrInvalidArgument, "not made by this package")
	var o accel.Optimizer
	wantStatus(t, o.Step(), accel.ErrInvalidArgument, "not made by this package")
	ok(t, m.Close()) // closes nothing
}

// Close on one goroutine while others query the tensor: each query sees the live tensor or
// ErrState, the tensor is freed once (a double free or a use after free would crash here).
func TestCloseRacesWithRunningTensorCalls(t *testing.T) {
	begin(t)
	for round := range 20 {
		x := must(accel.FromSlice([]float32{float32(round), 1, 2}))
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		running := make(chan struct{}, 4)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					if i == 1 {
						running <- struct{}{}
					}
					n, err := x.ElementCount()
					if err != nil {
						if e, ok := err.(*accel.Error); !ok || e.Status != accel.ErrState {
							errs <- err
						}
						return
					}
					if n != 3 {
						errs <- fmt.Errorf("a live tensor of %d elements, not 3", n)
						return
					}
				}
			}()
		}
		<-running // Close while the queries run
		ok(t, x.Close())
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
}
