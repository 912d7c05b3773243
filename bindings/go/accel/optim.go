package accel

// #include "shim.h"
import "C"

import "unsafe"

// Optimizer updates a model's parameters: "sgd", "adam", "adamw", "rmsprop" or "adagrad", with
// PyTorch's defaults and options set by key (lr, momentum, weight_decay, beta1, beta2, eps, ...).
// Once prepared it does nothing on accumulation micro-steps.
type Optimizer struct {
	h *handle[*C.accel_optimizer]
}

func (o *Optimizer) ref() *handle[*C.accel_optimizer] {
	if o == nil {
		return nil
	}
	return o.h.orUnopened()
}

// NewOptimizer is an optimizer of kind over model's parameters.
//
// Deprecated: use NewOptimizerWith and an options struct (AdamWOptions, SGDOptions, ...), which
// names every option and its default; removed in 0.4.
func NewOptimizer(model *Model, kind string) (*Optimizer, error) { return newOptimizer(model, kind) }

func newOptimizer(model *Model, kind string) (*Optimizer, error) {
	var out *C.accel_optimizer
	err := model.withStrings([]string{kind}, func(p *C.accel_model, c []*C.char) C.accel_status {
		return C.accel_optimizer_new(p, c[0], &out)
	})
	if err != nil {
		return nil, err
	}
	o := &Optimizer{}
	o.h = newHandle(o, out)
	return o, nil
}

// do runs one call with the optimizer's handle held.
func (o *Optimizer) do(f func(p *C.accel_optimizer) C.accel_status) error {
	return do(o.ref(), "Optimizer", f)
}

// Set sets an option ("lr", 0.01); it takes effect at the next step. It sets parameter group 0's
// option and the default that groups made later start from (AddGroup, SetGroup).
func (o *Optimizer) Set(key string, value any) error {
	return use(o.ref(), "Optimizer", func(p *C.accel_optimizer) error {
		return setOption(key, value, func(k, v *C.char) C.accel_status { return C.accel_optimizer_set(p, k, v) })
	})
}

// Step is one optimizer step (skipped on accumulation micro-steps and, under fp16, when a
// gradient is inf or nan).
func (o *Optimizer) Step() error {
	return o.do(func(p *C.accel_optimizer) C.accel_status { return C.accel_optimizer_step(p) })
}

// ZeroGrad sets the gradients to none (once prepared, only on steps that synchronise); on several
// processes the gradients that live in the communication buckets are zeroed in place instead (see
// accel_optimizer_zero_grad).
func (o *Optimizer) ZeroGrad() error {
	return o.do(func(p *C.accel_optimizer) C.accel_status { return C.accel_optimizer_zero_grad(p) })
}

// LR is the current learning rate (of parameter group 0: GroupLR for the others).
func (o *Optimizer) LR() (float64, error) {
	v, err := query(o.ref(), "Optimizer", func(p *C.accel_optimizer, out *C.double) C.accel_status {
		return C.accel_optimizer_lr(p, out)
	})
	return float64(v), err
}

// SetLR sets the learning rate: group 0's and the default, as Set("lr", lr).
func (o *Optimizer) SetLR(lr float64) error {
	return o.do(func(p *C.accel_optimizer) C.accel_status { return C.accel_optimizer_set_lr(p, C.double(lr)) })
}

// StepWasSkipped reports whether the last prepared step was skipped (an fp16 gradient was inf
// or nan).
func (o *Optimizer) StepWasSkipped() (bool, error) {
	v, err := query(o.ref(), "Optimizer", func(p *C.accel_optimizer, out *C.bool) C.accel_status {
		return C.accel_optimizer_step_was_skipped(p, out)
	})
	return bool(v), err
}

// AddGroup makes a parameter group of the parameters names (as Model.TensorNames lists them),
// as PyTorch's param_groups: its options start from the optimizer's defaults of this moment
// (what Set set) and are then set with SetGroup; each parameter steps with its group's options.
// Group 0 holds every parameter no other group names. It returns the group's index (1, 2, ...).
// A name that is not one of the model's parameters, one given twice or already in another group,
// or no name at all is ErrInvalidArgument; ErrState once the optimizer is prepared, has stepped
// or drives a scheduler: make the groups first (a scheduler takes each group's base rate).
//
//	decay, err := opt.AddGroup("fc1.weight", "fc2.weight") // the classic: no decay on biases
//	opt.SetGroup(0, "weight_decay", 0)
//	opt.SetGroup(decay, "weight_decay", 0.01)
func (o *Optimizer) AddGroup(names ...string) (int, error) {
	var group C.size_t
	err := use(o.ref(), "Optimizer", func(p *C.accel_optimizer) error {
		cs := make([]*C.char, len(names))
		for i, name := range names {
			c, free, err := cString(name, "a parameter name")
			if err != nil {
				return err
			}
			defer free()
			cs[i] = c
		}
		var first **C.char
		if len(cs) > 0 {
			first = &cs[0] // C pointers in Go memory: cgo allows it
		}
		return call(func() C.accel_status { return C.accel_optimizer_add_group(p, first, C.size_t(len(cs)), &group) })
	})
	return int(group), err
}

// GroupCount is the number of parameter groups: 1 (group 0) plus one per AddGroup.
func (o *Optimizer) GroupCount() (int, error) {
	v, err := query(o.ref(), "Optimizer", func(p *C.accel_optimizer, out *C.size_t) C.accel_status {
		return C.accel_optimizer_group_count(p, out)
	})
	return int(v), err
}

func checkGroup(group int) error {
	if group < 0 {
		return newError(ErrInvalidArgument, "parameter group %d: groups count from 0", group)
	}
	return nil
}

// SetGroup sets an option of parameter group group, with Set's keys and values (lr,
// weight_decay, momentum, beta1, ...); it takes effect at the next step. Group 0's leaves the
// defaults that later groups start from alone (Set sets both). A group that does not exist is
// ErrInvalidArgument.
func (o *Optimizer) SetGroup(group int, key string, value any) error {
	if err := checkGroup(group); err != nil {
		return err
	}
	return use(o.ref(), "Optimizer", func(p *C.accel_optimizer) error {
		return setOption(key, value, func(k, v *C.char) C.accel_status {
			return C.accel_optimizer_set_group(p, C.size_t(group), k, v)
		})
	})
}

// GroupLR is the current learning rate of parameter group group (a scheduler sets every
// group's; LR is group 0's).
func (o *Optimizer) GroupLR(group int) (float64, error) {
	if err := checkGroup(group); err != nil {
		return 0, err
	}
	v, err := query(o.ref(), "Optimizer", func(p *C.accel_optimizer, out *C.double) C.accel_status {
		return C.accel_optimizer_group_lr(p, C.size_t(group), out)
	})
	return float64(v), err
}

// Close frees the optimizer handle (schedulers over it, and the accelerator once prepared, keep
// the optimizer). Idempotent; safe from any goroutine.
func (o *Optimizer) Close() error { return o.ref().close() }

func (o *Optimizer) preparable() (unsafe.Pointer, func(), error) {
	return prepared(o.ref(), "Optimizer", func(p *C.accel_optimizer) unsafe.Pointer { return unsafe.Pointer(p) })
}

// Scheduler drives an optimizer's learning rate with PyTorch's and Hugging Face's schedules:
// constant, constant_with_warmup, linear, cosine, cosine_with_restarts, polynomial, step,
// exponential, one_cycle (options: warmup_steps, total_steps, num_cycles, gamma, ...). Prepared,
// it steps as Accelerate: num_processes times per real optimizer step.
type Scheduler struct {
	h *handle[*C.accel_scheduler]
}

func (s *Scheduler) ref() *handle[*C.accel_scheduler] {
	if s == nil {
		return nil
	}
	return s.h.orUnopened()
}

// NewScheduler is a schedule of kind driving opt. Its base rate is the optimizer's rate now.
//
// Deprecated: use NewSchedulerWith and a schedule struct (LinearSchedule, CosineSchedule, ...);
// removed in 0.4.
func NewScheduler(opt *Optimizer, kind string) (*Scheduler, error) { return newScheduler(opt, kind) }

func newScheduler(opt *Optimizer, kind string) (*Scheduler, error) {
	ckind, free, err := cString(kind, "the kind")
	if err != nil {
		return nil, err
	}
	defer free()
	var out *C.accel_scheduler
	err = opt.do(func(p *C.accel_optimizer) C.accel_status { return C.accel_scheduler_new(p, ckind, &out) })
	if err != nil {
		return nil, err
	}
	s := &Scheduler{}
	s.h = newHandle(s, out)
	return s, nil
}

func (s *Scheduler) do(f func(p *C.accel_scheduler) C.accel_status) error {
	return do(s.ref(), "Scheduler", f)
}

// Set sets an option ("warmup_steps", 100) before the first step.
func (s *Scheduler) Set(key string, value any) error {
	return use(s.ref(), "Scheduler", func(p *C.accel_scheduler) error {
		return setOption(key, value, func(k, v *C.char) C.accel_status { return C.accel_scheduler_set(p, k, v) })
	})
}

// Step steps the schedule (see accel.h, accel_scheduler_new, for the prepared rules).
func (s *Scheduler) Step() error {
	return s.do(func(p *C.accel_scheduler) C.accel_status { return C.accel_scheduler_step(p) })
}

// LR is the learning rate the schedule has set.
func (s *Scheduler) LR() (float64, error) {
	v, err := query(s.ref(), "Scheduler", func(p *C.accel_scheduler, out *C.double) C.accel_status {
		return C.accel_scheduler_lr(p, out)
	})
	return float64(v), err
}

// Close frees the scheduler handle. Idempotent; safe from any goroutine.
func (s *Scheduler) Close() error { return s.ref().close() }

func (s *Scheduler) preparable() (unsafe.Pointer, func(), error) {
	return prepared(s.ref(), "Scheduler", func(p *C.accel_scheduler) unsafe.Pointer { return unsafe.Pointer(p) })
}
