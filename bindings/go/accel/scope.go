package accel

import (
	"errors"
	"io"
	"slices"
	"sync"
)

// Scope closes, all at once, the handles added to it: the tensors of one step (its loss, what
// its collectives returned) without a Close for each. The zero value is ready; Close empties it,
// so one Scope serves step after step. Safe for concurrent use.
//
//	var s accel.Scope
//	defer s.Close()
//	loss, err := s.Tensor(model.Call("training_step", batch...))
//	...
//	sum, err := s.Tensor(acc.Reduce(loss, accel.Sum))
//
// A tensor read at once needs no scope: TakeFloat64 and TakeSlice close what they read.
type Scope struct {
	mu      sync.Mutex
	closers []io.Closer
}

// Tensor adds t to the scope and passes t and err on, so that a call's two results go straight
// through: s.Tensor(acc.Gather(x)). A nil t (err set) adds nothing.
func (s *Scope) Tensor(t *Tensor, err error) (*Tensor, error) {
	if t != nil {
		s.Add(t)
	}
	return t, err
}

// Tensors adds every tensor of ts (CallAll's results) and passes ts and err on.
func (s *Scope) Tensors(ts []*Tensor, err error) ([]*Tensor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range ts {
		if t != nil {
			s.closers = append(s.closers, t)
		}
	}
	return ts, err
}

// Add adds any handle (a model, a dataloader, a batch, ...) to close with the scope.
func (s *Scope) Add(c io.Closer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closers = append(s.closers, c)
}

// Close closes what was added, the last added first, and empties the scope. It returns the
// closes' errors joined (the package's own Close methods return nil).
func (s *Scope) Close() error {
	s.mu.Lock()
	closers := s.closers
	s.closers = nil
	s.mu.Unlock()
	var errs []error
	for _, c := range slices.Backward(closers) {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// TakeFloat64 is the value of a one-element tensor that a call returned, which it then closes:
//
//	mean, err := accel.TakeFloat64(acc.Reduce(x, accel.Mean))
//
// With err set it returns err (and t, if any, is closed all the same).
func TakeFloat64(t *Tensor, err error) (float64, error) {
	defer t.Close()
	if err != nil {
		return 0, err
	}
	return t.Float64()
}

// TakeSlice is ToSlice of a tensor that a call returned, which it then closes:
//
//	hits, err := accel.TakeSlice[int64](acc.GatherForMetrics(correct))
func TakeSlice[T Element](t *Tensor, err error) ([]T, error) {
	defer t.Close()
	if err != nil {
		return nil, err
	}
	return ToSlice[T](t)
}
