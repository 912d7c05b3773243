package accel

// #include "shim.h"
import "C"

import (
	"context"
	"errors"
	"sync"
)

// Calls that wait take a context.Context in their XxxContext form (as database/sql's
// QueryContext beside Query): when ctx is cancelled or its deadline passes while the call waits,
// the call returns within about 50 ms an *Error with Status ErrCancelled whose Cause is
// ctx.Err(), so both errors.Is(err, context.Canceled) (or context.DeadlineExceeded) and
// errors.Is(err, accel.ErrCancelled) hold. A ctx already done fails the call before it starts.
//
// What an interruption leaves (accel.h, accel_set_interrupted): a collective it ends leaves the
// process group unusable (later collectives fail with ErrState; end the job), a dataloader's Next
// loses nothing (the batch it waited for is the next call's). The interruption is the process's:
// while one call's ctx is done, every call of the process that waits is interrupted too.

// SetInterrupted interrupts (true) or stops interrupting (false) every call of this process that
// waits (accel_set_interrupted). Safe from any goroutine; the XxxContext methods use it.
func (a *Accelerator) SetInterrupted(interrupted bool) error {
	p, err := a.ref().acquire("Accelerator")
	if err != nil {
		return err
	}
	defer a.h.release()
	flag := C.int(0)
	if interrupted {
		flag = 1
	}
	return call(func() C.accel_status { return C.accel_set_interrupted(p, flag) })
}

// The process's accelerator (a process has one), for the objects' XxxContext methods: its library
// handle, set by New and forgotten before the free, both under interruptMu. A handle, not the Go
// object: a weak pointer to that slowed every tensor's make and free by about 7 % (the bench).
var (
	interruptMu sync.Mutex
	live        *C.accel_accelerator
	interrupts  int // contexts done while their call waits; interrupted while above 0
)

func setLiveAccelerator(p *C.accel_accelerator) {
	interruptMu.Lock()
	defer interruptMu.Unlock()
	live = p // the library clears an interruption when it makes an accelerator
}

func forgetLiveAccelerator(p *C.accel_accelerator) {
	interruptMu.Lock()
	defer interruptMu.Unlock()
	if live == p {
		live = nil
	}
}

func interruptProcess(on bool) {
	interruptMu.Lock()
	defer interruptMu.Unlock()
	if on {
		interrupts++
	} else {
		interrupts--
	}
	if live == nil || (on && interrupts != 1) || (!on && interrupts != 0) {
		return
	}
	flag := C.int(0)
	if on {
		flag = 1
	}
	C.accel_set_interrupted(live, flag) // cannot fail on a live handle; takes no lock of its own
}

func cancelled(ctx context.Context) error {
	return &Error{Status: ErrCancelled, Message: "the context is done", Cause: ctx.Err()}
}

// honour runs f, interrupting the process's waits if ctx is done before f returns.
func honour(ctx context.Context, f func() error) error {
	if ctx == nil {
		return newError(ErrInvalidArgument, "nil context.Context (pass context.Background())")
	}
	if ctx.Err() != nil {
		return cancelled(ctx)
	}
	if ctx.Done() == nil { // Background and TODO are never done: no watcher
		return f()
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		interruptProcess(true)
		close(fired)
	})
	err := f()
	if stop() {
		return err
	}
	<-fired
	interruptProcess(false)
	var e *Error
	if errors.As(err, &e) && e.Status == ErrCancelled && e.Cause == nil {
		e.Cause = ctx.Err()
	}
	return err
}

// NewContext is New, given up when ctx is done first (the rendezvous waits for every rank). The
// abandoned rendezvous goes on in the background and closes the accelerator it makes, so a New
// right after it may find that one still alive (ErrState: one accelerator per process).
func NewContext(ctx context.Context, cfg *Config) (*Accelerator, error) {
	if ctx == nil {
		return nil, newError(ErrInvalidArgument, "nil context.Context (pass context.Background())")
	}
	if ctx.Err() != nil {
		return nil, cancelled(ctx)
	}
	if ctx.Done() == nil {
		return New(cfg)
	}
	type made struct {
		a   *Accelerator
		err error
	}
	done := make(chan made, 1)
	go func() {
		a, err := New(cfg)
		done <- made{a, err}
	}()
	select {
	case m := <-done:
		return m.a, m.err
	case <-ctx.Done():
		go func() {
			if m := <-done; m.a != nil {
				m.a.Close()
			}
		}()
		return nil, cancelled(ctx)
	}
}

// WaitForEveryoneContext is WaitForEveryone, interrupted when ctx is done.
func (a *Accelerator) WaitForEveryoneContext(ctx context.Context) error {
	return honour(ctx, a.WaitForEveryone)
}

// tensorContext runs a collective that makes one tensor under ctx.
func tensorContext(ctx context.Context, f func() (*Tensor, error)) (*Tensor, error) {
	var out *Tensor
	err := honour(ctx, func() (err error) {
		out, err = f()
		return err
	})
	return out, err
}

// GatherContext is Gather, interrupted when ctx is done.
func (a *Accelerator) GatherContext(ctx context.Context, t *Tensor) (*Tensor, error) {
	return tensorContext(ctx, func() (*Tensor, error) { return a.Gather(t) })
}

// GatherForMetricsContext is GatherForMetrics, interrupted when ctx is done.
func (a *Accelerator) GatherForMetricsContext(ctx context.Context, t *Tensor) (*Tensor, error) {
	return tensorContext(ctx, func() (*Tensor, error) { return a.GatherForMetrics(t) })
}

// PadAcrossProcessesContext is PadAcrossProcesses, interrupted when ctx is done.
func (a *Accelerator) PadAcrossProcessesContext(ctx context.Context, t *Tensor, dim int64, padValue float64, padFirst bool) (*Tensor, error) {
	return tensorContext(ctx, func() (*Tensor, error) { return a.PadAcrossProcesses(t, dim, padValue, padFirst) })
}

// ReduceContext is Reduce, interrupted when ctx is done.
func (a *Accelerator) ReduceContext(ctx context.Context, t *Tensor, r Reduction) (*Tensor, error) {
	return tensorContext(ctx, func() (*Tensor, error) { return a.Reduce(t, r) })
}

// BroadcastContext is Broadcast, interrupted when ctx is done.
func (a *Accelerator) BroadcastContext(ctx context.Context, t *Tensor, from int) (*Tensor, error) {
	return tensorContext(ctx, func() (*Tensor, error) { return a.Broadcast(t, from) })
}

// GatherObjectContext is GatherObject, interrupted when ctx is done.
func (a *Accelerator) GatherObjectContext(ctx context.Context, data []byte) ([][]byte, error) {
	var out [][]byte
	err := honour(ctx, func() (err error) {
		out, err = a.GatherObject(data)
		return err
	})
	return out, err
}

// BackwardContext is Backward, interrupted when ctx is done (the gradients' all-reduce waits).
func (a *Accelerator) BackwardContext(ctx context.Context, loss *Tensor) error {
	return honour(ctx, func() error { return a.Backward(loss) })
}

// SaveStateContext is SaveState, interrupted when ctx is done (an interrupted save leaves no
// checkpoint behind: it is renamed into place only when complete).
func (a *Accelerator) SaveStateContext(ctx context.Context, dir string) error {
	return honour(ctx, func() error { return a.SaveState(dir) })
}

// LoadStateContext is LoadState, interrupted when ctx is done.
func (a *Accelerator) LoadStateContext(ctx context.Context, dir string) error {
	return honour(ctx, func() error { return a.LoadState(dir) })
}

// NextContext is Next, interrupted when ctx is done while it waits for the dataloader's workers
// (or, with dispatch_batches, for the other processes). An interrupted Next loses no batch.
func (l *DataLoader) NextContext(ctx context.Context) (batch Batch, ok bool, err error) {
	err = honour(ctx, func() (err error) {
		batch, ok, err = l.Next()
		return err
	})
	return batch, ok, err
}

// StepContext is Step, interrupted when ctx is done (under ZeRO a step gathers the parameters).
func (o *Optimizer) StepContext(ctx context.Context) error {
	return honour(ctx, o.Step)
}

// TrainContext is Train, interrupted when ctx is done: before the next step, or inside one that
// waits. The objects are where the last step left them and the last checkpoint is intact.
func (t *Trainer) TrainContext(ctx context.Context) error {
	return honour(ctx, t.Train)
}

// EvaluateContext is Evaluate, interrupted when ctx is done.
func (t *Trainer) EvaluateContext(ctx context.Context) (map[string]float64, error) {
	var out map[string]float64
	err := honour(ctx, func() (err error) {
		out, err = t.Evaluate()
		return err
	})
	return out, err
}

// PredictContext is Predict, interrupted when ctx is done.
func (t *Trainer) PredictContext(ctx context.Context, loader *DataLoader) (*Prediction, error) {
	var out *Prediction
	err := honour(ctx, func() (err error) {
		out, err = t.Predict(loader)
		return err
	})
	return out, err
}
