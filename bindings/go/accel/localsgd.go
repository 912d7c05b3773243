package accel

// #include "shim.h"
import "C"

// LocalSGD is Accelerate's LocalSGD: from NewLocalSGD until End, the model's gradients are not
// synchronised across the ranks (as inside NoSync), and every localSGDSteps-th Step (call it
// after each optimizer step) averages the model's parameters across the ranks instead; buffers
// and optimizer state stay each rank's own. End averages once more unless the last Step just did
// (n steps average ceil(n / localSGDSteps) times) and ends the no_sync. With one process it only
// counts steps. Accelerator.LocalSGD is the block form, which ends it for the program.
//
// Options (Set, before the first Step), beyond Accelerate: outer_optimizer ("none": the plain
// average; "nesterov": DiLoCo's outer step, the change of the averaged parameters since the
// last average as the gradient of an SGD with Nesterov momentum), outer_lr (0.7),
// outer_momentum (0.9).
type LocalSGD struct {
	h *handle[*C.accel_local_sgd]
}

func (l *LocalSGD) ref() *handle[*C.accel_local_sgd] {
	if l == nil {
		return nil
	}
	return l.h.orUnopened()
}

// NewLocalSGD starts LocalSGD over model, which must be prepared in a job of several processes
// (ErrState; with one process any model). localSGDSteps < 1 is ErrInvalidArgument; ZeRO (any
// stage) is ErrUnsupported, as Accelerate refuses DeepSpeed and FSDP. Close without End stops it
// without averaging (no collective).
func NewLocalSGD(acc *Accelerator, model *Model, localSGDSteps int64) (*LocalSGD, error) {
	var out *C.accel_local_sgd
	err := use(model.ref(), "Model", func(m *C.accel_model) error {
		return acc.do(func(p *C.accel_accelerator) C.accel_status {
			return C.accel_local_sgd_begin(p, m, C.int64_t(localSGDSteps), &out)
		})
	})
	if err != nil {
		return nil, err
	}
	l := &LocalSGD{}
	l.h = newHandle(l, out)
	return l, nil
}

func (l *LocalSGD) do(f func(p *C.accel_local_sgd) C.accel_status) error {
	return do(l.ref(), "LocalSGD", f)
}

// Set sets an option ("outer_optimizer", "nesterov") before the first Step.
func (l *LocalSGD) Set(key string, value any) error {
	return use(l.ref(), "LocalSGD", func(p *C.accel_local_sgd) error {
		return setOption(key, value, func(k, v *C.char) C.accel_status { return C.accel_local_sgd_set(p, k, v) })
	})
}

// Step counts an optimizer step; every localSGDSteps-th averages the parameters (a collective:
// every rank calls it alike). After End it is ErrState.
func (l *LocalSGD) Step() error {
	return l.do(func(p *C.accel_local_sgd) C.accel_status { return C.accel_local_sgd_step(p) })
}

// End averages once more unless the last Step just did, and ends the no_sync (a collective when
// it averages). A second End does nothing.
func (l *LocalSGD) End() error {
	return l.do(func(p *C.accel_local_sgd) C.accel_status { return C.accel_local_sgd_end(p) })
}

// AverageCount is how many times the parameters were averaged so far.
func (l *LocalSGD) AverageCount() (int64, error) {
	v, err := query(l.ref(), "LocalSGD", func(p *C.accel_local_sgd, out *C.int64_t) C.accel_status {
		return C.accel_local_sgd_average_count(p, out)
	})
	return int64(v), err
}

// Close frees the handle; one not ended ends its no_sync without averaging (no collective).
// Idempotent; safe from any goroutine.
func (l *LocalSGD) Close() error { return l.ref().close() }

// LocalSGD runs fn under LocalSGD over model (Accelerate's `with LocalSGD(...) as local_sgd:`):
// fn calls l.Step() after each optimizer step; when fn returns nil, End averages a last time and
// its error is returned. When fn fails or panics, LocalSGD stops without averaging (no
// collective), fn's error is returned and a panic goes on. l is closed when LocalSGD returns.
//
//	err := acc.LocalSGD(model, 8, func(l *accel.LocalSGD) error {
//		for batch, err := range loader.All() {
//			... // forward, acc.Backward, opt.Step, opt.ZeroGrad
//			if err := l.Step(); err != nil {
//				return err
//			}
//		}
//		return nil
//	})
func (a *Accelerator) LocalSGD(model *Model, localSGDSteps int64, fn func(l *LocalSGD) error) error {
	if fn == nil {
		return newError(ErrInvalidArgument, "LocalSGD: fn is nil")
	}
	l, err := NewLocalSGD(a, model, localSGDSteps)
	if err != nil {
		return err
	}
	defer l.Close() // after End; or, on a failure or a panic, instead of it
	if err := fn(l); err != nil {
		return err
	}
	return l.End()
}
