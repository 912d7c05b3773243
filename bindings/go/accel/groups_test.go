package accel_test

import (
	"math"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// Parameter groups: the bias in a group of its own with its own learning rate steps with it,
// the weight with group 0's.
func TestOptimizerGroupsStepEachParameterWithItsGroupsOptions(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	m := must(accel.NewModel())
	defer m.Close()
	ok(t, m.AddLayer("fc", "linear", "in_features=3 out_features=2"))
	ok(t, m.Define(gradSource))
	opt := must(accel.NewOptimizer(m, "sgd"))
	defer opt.Close()
	ok(t, opt.Set("lr", 0.1))
	if n := must(opt.GroupCount()); n != 1 {
		t.Fatalf("%d groups before any AddGroup", n)
	}
	_, err := opt.AddGroup()
	wantStatus(t, err, accel.ErrInvalidArgument)
	_, err = opt.AddGroup("fc.nothing")
	wantStatus(t, err, accel.ErrInvalidArgument, "fc.nothing")
	bias := must(opt.AddGroup("fc.bias"))
	if bias != 1 || must(opt.GroupCount()) != 2 {
		t.Fatalf("group %d of %d", bias, must(opt.GroupCount()))
	}
	_, err = opt.AddGroup("fc.bias")
	wantStatus(t, err, accel.ErrInvalidArgument, "fc.bias") // in a group already
	// The new group starts from the defaults; its own option leaves group 0's alone, and Set
	// (group 0's and the default) leaves the group's alone.
	if lr := must(opt.GroupLR(bias)); lr != 0.1 {
		t.Fatalf("the new group's lr %v", lr)
	}
	ok(t, opt.SetGroup(bias, "lr", 0.5))
	ok(t, opt.Set("lr", 0.25))
	if lr0, lr1 := must(opt.LR()), must(opt.GroupLR(bias)); lr0 != 0.25 || lr1 != 0.5 || must(opt.GroupLR(0)) != 0.25 {
		t.Fatalf("rates %v and %v", lr0, lr1)
	}
	wantStatus(t, opt.SetGroup(2, "lr", 1), accel.ErrInvalidArgument)
	wantStatus(t, opt.SetGroup(-1, "lr", 1), accel.ErrInvalidArgument)
	wantStatus(t, opt.SetGroup(bias, "lr", -1), accel.ErrInvalidArgument)
	_, err = opt.GroupLR(7)
	wantStatus(t, err, accel.ErrInvalidArgument)

	weight0 := must(accel.TakeSlice[float32](m.Tensor("fc.weight")))
	bias0 := must(accel.TakeSlice[float32](m.Tensor("fc.bias")))
	// d loss / d weight is x on each row, d loss / d bias is 1.
	xs := []float32{1, -2, 0.5}
	x := must(accel.FromSlice(xs, 1, 3))
	defer x.Close()
	loss := must(m.Call("loss", x))
	defer loss.Close()
	ok(t, acc.Backward(loss))
	ok(t, opt.Step())
	weight1 := must(accel.TakeSlice[float32](m.Tensor("fc.weight")))
	bias1 := must(accel.TakeSlice[float32](m.Tensor("fc.bias")))
	for i := range weight1 {
		if want := weight0[i] - float32(0.25)*xs[i%3]; math.Abs(float64(weight1[i]-want)) > 1e-6 {
			t.Fatalf("weight %d: %v, want %v (lr 0.25)", i, weight1[i], want)
		}
	}
	for i := range bias1 {
		if want := bias0[i] - 0.5; math.Abs(float64(bias1[i]-want)) > 1e-6 {
			t.Fatalf("bias %d: %v, want %v (lr 0.5)", i, bias1[i], want)
		}
	}
	_, err = opt.AddGroup("fc.weight")
	wantStatus(t, err, accel.ErrState) // after a step
}

// A scheduler scales each group's own base rate.
func TestASchedulerScalesEveryGroupsRate(t *testing.T) {
	begin(t)
	m := linearModel(t, 3, 2)
	defer m.Close()
	opt := must(accel.NewOptimizer(m, "adamw"))
	defer opt.Close()
	ok(t, opt.Set("lr", 0.01))
	decay := must(opt.AddGroup("fc.weight"))
	ok(t, opt.SetGroup(decay, "lr", 0.04))
	ok(t, opt.SetGroup(decay, "weight_decay", 0.1))
	ok(t, opt.SetGroup(0, "weight_decay", 0))
	sched := must(accel.NewScheduler(opt, "step"))
	defer sched.Close()
	ok(t, sched.Set("step_size", 1))
	ok(t, sched.Set("gamma", 0.5))
	ok(t, sched.Step())
	if lr0, lr1 := must(opt.GroupLR(0)), must(opt.GroupLR(decay)); lr0 != 0.005 || lr1 != 0.02 || must(sched.LR()) != 0.005 {
		t.Fatalf("after one step of gamma 0.5: %v and %v", lr0, lr1)
	}
	_, err := opt.AddGroup("fc.bias")
	wantStatus(t, err, accel.ErrState) // a scheduler drives it
	var none *accel.Optimizer
	_, err = none.GroupCount()
	wantStatus(t, err, accel.ErrInvalidArgument, "nil *accel.Optimizer")
}
