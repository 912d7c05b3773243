package accel_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// closeRecorder records the order of Close calls and returns err.
type closeRecorder struct {
	name  string
	order *[]string
	err   error
}

func (c closeRecorder) Close() error {
	*c.order = append(*c.order, c.name)
	return c.err
}

func TestAScopeClosesWhatWasAddedLastFirst(t *testing.T) {
	begin(t)
	var s accel.Scope
	x := must(s.Tensor(accel.FromSlice([]float32{1, 2})))
	pair := must(s.Tensors([]*accel.Tensor{must(accel.FromSlice([]float32{3})), nil}, nil))
	var order []string
	failure := errors.New("the recorder's own failure")
	s.Add(closeRecorder{"first", &order, nil})
	s.Add(closeRecorder{"last", &order, failure})
	// A failed call's error passes through, and nothing is added.
	_, err := s.Tensor(accel.FromSlice([]float32{1}, 5))
	wantStatus(t, err, accel.ErrInvalidArgument)
	if must(x.ElementCount()) != 2 || must(pair[0].Float64()) != 3 {
		t.Fatal("the scope's tensors are not the calls' results")
	}
	if err := s.Close(); !errors.Is(err, failure) {
		t.Fatalf("Close returned %v, not the recorder's failure", err)
	}
	if !slices.Equal(order, []string{"last", "first"}) {
		t.Fatalf("closed in the order %v", order)
	}
	for _, closed := range []*accel.Tensor{x, pair[0]} {
		_, err := closed.ElementCount()
		wantStatus(t, err, accel.ErrState, "after Close")
	}
	// Emptied: a second Close closes nothing again, and the scope serves the next step.
	ok(t, s.Close())
	y := must(s.Tensor(accel.Scalar(int64(7))))
	ok(t, s.Close())
	_, err = y.Int64()
	wantStatus(t, err, accel.ErrState, "after Close")
	if len(order) != 2 {
		t.Fatalf("a closer was closed twice: %v", order)
	}
}

func TestTakeReadsAndCloses(t *testing.T) {
	begin(t)
	x := must(accel.FromSlice([]int64{4, 5, 6}))
	if v := must(accel.TakeSlice[int64](x, nil)); !slices.Equal(v, []int64{4, 5, 6}) {
		t.Fatalf("TakeSlice read %v", v)
	}
	_, err := x.ElementCount()
	wantStatus(t, err, accel.ErrState, "after Close")
	y := must(accel.Scalar(2.5))
	if v := must(accel.TakeFloat64(y, nil)); v != 2.5 {
		t.Fatalf("TakeFloat64 read %v", v)
	}
	_, err = y.Float64()
	wantStatus(t, err, accel.ErrState, "after Close")
	// A call's error passes through; a wrong element type is an error, and the tensor is closed.
	_, err = accel.TakeFloat64(accel.FromSlice([]float32{1}, 3))
	wantStatus(t, err, accel.ErrInvalidArgument)
	z := must(accel.FromSlice([]float32{1}))
	_, err = accel.TakeSlice[int64](z, nil)
	wantStatus(t, err, accel.ErrDType)
	_, err = z.ElementCount()
	wantStatus(t, err, accel.ErrState, "after Close")
}
