package accel

// #include "shim.h"
import "C"

import (
	"strconv"
	"strings"
)

// Typed options: a struct per kind of optimizer (SGDOptions, AdamOptions, AdamWOptions,
// RMSpropOptions, AdagradOptions), schedule (ConstantSchedule, LinearSchedule, ...,
// OneCycleSchedule), layer (LinearOptions, Conv2dOptions, BatchNorm2dOptions, LayerNormOptions,
// EmbeddingOptions) and DataLoaderOptions, generated from accel.h's option tables
// (options_generated.go). An option is a pointer, nil keeping the library's default, so that a
// zero is a value like any other (WeightDecay: Ptr(0.0)); what a layer or schedule cannot do
// without is a plain field:
//
//	opt, err := accel.NewOptimizerWith(model, accel.AdamWOptions{LR: accel.Ptr(5e-3)})
//	err = model.Add("fc", accel.LinearOptions{InFeatures: 784, OutFeatures: 10})
//
// The by-key forms (Set, SetGroup) stay for options chosen at run time.

// Ptr is a pointer to v, for the options' fields (Go 1.26 writes new(v)).
func Ptr[T any](v T) *T { return &v }

type optionPair struct{ key, value string }

// formatReal writes a float as the library reads it back, exactly.
func formatReal(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// OptimizerOptions is one of the optimizer option structs (SGDOptions ... AdagradOptions).
type OptimizerOptions interface {
	optimizerKind() string
	pairs() []optionPair
}

// ScheduleOptions is one of the schedule structs (ConstantSchedule ... OneCycleSchedule).
type ScheduleOptions interface {
	scheduleKind() string
	pairs() []optionPair
}

// LayerOptions is one of the layer option structs (LinearOptions ... EmbeddingOptions).
type LayerOptions interface {
	layerKind() string
	pairs() []optionPair
}

// setAll sets each pair with set; the first failure is the error.
func setAll(pairs []optionPair, set func(key string, value any) error) error {
	for _, p := range pairs {
		if err := set(p.key, p.value); err != nil {
			return err
		}
	}
	return nil
}

// NewOptimizerWith is an optimizer over model's parameters with opts' kind and options (an
// option out of range is ErrInvalidArgument naming it, and nothing is made).
func NewOptimizerWith(model *Model, opts OptimizerOptions) (*Optimizer, error) {
	if opts == nil {
		return nil, newError(ErrInvalidArgument, "NewOptimizerWith: nil options")
	}
	o, err := newOptimizer(model, opts.optimizerKind())
	if err != nil {
		return nil, err
	}
	if err := setAll(opts.pairs(), o.Set); err != nil {
		o.Close()
		return nil, err
	}
	return o, nil
}

// NewSchedulerWith is a schedule of opts' kind and options driving opt; its base rate is the
// optimizer's rate now.
func NewSchedulerWith(opt *Optimizer, opts ScheduleOptions) (*Scheduler, error) {
	if opts == nil {
		return nil, newError(ErrInvalidArgument, "NewSchedulerWith: nil options")
	}
	s, err := newScheduler(opt, opts.scheduleKind())
	if err != nil {
		return nil, err
	}
	if err := setAll(opts.pairs(), s.Set); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// NewDataLoaderWith is NewDataLoader with opts set (an option out of range is
// ErrInvalidArgument naming it, and nothing is made).
func NewDataLoaderWith(acc *Accelerator, ds *Dataset, opts DataLoaderOptions) (*DataLoader, error) {
	l, err := NewDataLoader(acc, ds)
	if err != nil {
		return nil, err
	}
	if err := l.SetOptions(opts); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// SetOptions sets the options opts gives (its nil fields change nothing); an epoch in progress
// ends. It stops at the first bad option, which is ErrInvalidArgument naming it.
func (l *DataLoader) SetOptions(opts DataLoaderOptions) error {
	return setAll(opts.pairs(), l.Set)
}

// Add adds a layer of the catalogue as name, with opts' kind and options (its parameters become
// name.weight, name.bias, ...).
func (m *Model) Add(name string, opts LayerOptions) error {
	if opts == nil {
		return newError(ErrInvalidArgument, "Model.Add: nil options")
	}
	spec := make([]string, 0, 8)
	for _, p := range opts.pairs() {
		spec = append(spec, p.key+"="+p.value)
	}
	return m.addLayer(name, opts.layerKind(), strings.Join(spec, " "))
}
