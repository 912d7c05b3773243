package accel_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// cur is the running test: tests run one at a time (one accelerator per process), and Go
// cannot pass t beside a call's two results, as must(t, f()) would need.
var cur testing.TB

// begin also keeps the test on one OS thread, as a training program does (see accel.New).
func begin(t testing.TB) {
	cur = t
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

// must fails the running test on an error and returns the value.
func must[T any](v T, err error) T {
	if err != nil {
		cur.Helper()
		cur.Fatal(err)
	}
	return v
}

func ok(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantStatus checks that err is an *accel.Error of status s whose message has every fragment.
func wantStatus(t testing.TB, err error, s accel.Status, fragments ...string) *accel.Error {
	t.Helper()
	var e *accel.Error
	if !errors.As(err, &e) {
		t.Fatalf("want an *accel.Error with %v, got %v", s, err)
	}
	if !errors.Is(err, s) {
		t.Fatalf("want %v, got %v", s, err)
	}
	for _, f := range fragments {
		if !strings.Contains(e.Message, f) {
			t.Fatalf("message %q lacks %q", e.Message, f)
		}
	}
	return e
}

func TestTheLoadedLibraryIsTheSupportedVersion(t *testing.T) {
	begin(t)
	if got := accel.Version(); got != "0.2.4" {
		t.Fatalf("Version() = %q", got)
	}
	if accel.HeaderVersion < accel.MinVersion || accel.HeaderVersion >= accel.MaxVersion {
		t.Fatalf("header %d outside [%d, %d)", accel.HeaderVersion, accel.MinVersion, accel.MaxVersion)
	}
}

func TestConfigValidatesAndReportsSources(t *testing.T) {
	begin(t)
	cfg := must(accel.NewConfig())
	defer cfg.Close()
	ok(t, cfg.Set("mixed_precision", "bf16"))
	ok(t, cfg.Set("gradient_accumulation_steps", 4))
	ok(t, cfg.Set("split_batches", true))
	ok(t, cfg.Set("rendezvous_timeout", 2.5))
	if v := must(cfg.Get("gradient_accumulation_steps")); v != "4" {
		t.Fatalf("gradient_accumulation_steps = %q", v)
	}
	wantStatus(t, cfg.Set("no_such_key", "1"), accel.ErrConfig, "no_such_key")
	wantStatus(t, cfg.Set("num_processes", "two"), accel.ErrConfig, "num_processes")
	wantStatus(t, cfg.Set("mixed_precision", "fp8"), accel.ErrUnsupported, "mixed_precision")
	wantStatus(t, cfg.Set("num_processes", []int{1}), accel.ErrInvalidArgument, "[]int")
	wantStatus(t, cfg.Set("project_dir", "a\x00b"), accel.ErrInvalidArgument, "NUL")
	if v := must(cfg.Get("mixed_precision")); v != "bf16" {
		t.Fatalf("a failed Set changed the value: %q", v)
	}
	dump := must(cfg.Dump())
	if !strings.Contains(dump, "mixed_precision: bf16") || !strings.Contains(dump, "setter") {
		t.Fatalf("dump:\n%s", dump)
	}
	wantStatus(t, cfg.LoadFile(filepath.Join(t.TempDir(), "missing.yaml")), accel.ErrIO)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	ok(t, os.WriteFile(bad, []byte("mixed_precision: no\nnot_a_key: 3\n"), 0o644))
	wantStatus(t, cfg.LoadFile(bad), accel.ErrConfig, "not_a_key", "bad.yaml:2")
	ok(t, cfg.LoadFile("")) // Accelerate's default location: none in the tests' HF_HOME
}

func roundTrip[T accel.Element](t *testing.T, values []T) {
	t.Helper()
	tensor := must(accel.FromSlice(values, 2, int64(len(values)/2)))
	defer tensor.Close()
	if got := must(accel.ToSlice[T](tensor)); !slices.Equal(got, values) {
		t.Fatalf("%v came back as %v", values, got)
	}
	if d := must(tensor.DType()); d != accel.DTypeOf[T]() {
		t.Fatalf("dtype %v", d)
	}
	if s := must(tensor.Shape()); !slices.Equal(s, []int64{2, int64(len(values) / 2)}) {
		t.Fatalf("shape %v", s)
	}
}

func TestTensorsCopyEveryElementType(t *testing.T) {
	begin(t)
	roundTrip(t, []float32{1.5, -2, 3, 4e-8})
	roundTrip(t, []float64{1.5, -2, 3, 4e-300})
	roundTrip(t, []int64{1 << 40, -2, 3, 4})
	roundTrip(t, []int32{1 << 30, -2, 3, 4})
	roundTrip(t, []int16{1 << 14, -2, 3, 4})
	roundTrip(t, []int8{127, -128, 3, 4})
	roundTrip(t, []uint8{255, 0, 3, 4})
	roundTrip(t, []bool{true, false, false, true})

	// Row-major: the last dimension varies fastest.
	m := must(accel.FromSlice([]int32{1, 2, 3, 4, 5, 6}, 2, 3))
	defer m.Close()
	if n := must(m.ElementCount()); n != 6 {
		t.Fatalf("element count %d", n)
	}
	if n := must(m.DataSize()); n != 24 {
		t.Fatalf("data size %d", n)
	}
	if n := must(m.DimCount()); n != 2 {
		t.Fatalf("dim count %d", n)
	}
	s := must(accel.Scalar(2.5))
	defer s.Close()
	if v := must(s.Float64()); v != 2.5 {
		t.Fatalf("scalar %v", v)
	}
	if n := must(s.DimCount()); n != 0 {
		t.Fatalf("a scalar has %d dimensions", n)
	}
	i := must(accel.Scalar(int64(-7)))
	defer i.Close()
	if v := must(i.Int64()); v != -7 {
		t.Fatalf("int scalar %v", v)
	}
	// F16 through bytes: 1.0 and -2.0.
	h := must(accel.FromBytes([]byte{0x00, 0x3c, 0x00, 0xc0}, accel.F16, 2))
	defer h.Close()
	if b := must(h.Bytes()); !slices.Equal(b, []byte{0x00, 0x3c, 0x00, 0xc0}) {
		t.Fatalf("f16 bytes %v", b)
	}
	if accel.F16.Size() != 2 || accel.I64.Size() != 8 || accel.DType(99).Size() != 0 {
		t.Fatal("dtype sizes")
	}
	if accel.BF16.String() != "bf16" {
		t.Fatal(accel.BF16.String())
	}
	empty := must(accel.FromSlice([]float32{}))
	defer empty.Close()
	if got := must(accel.ToSlice[float32](empty)); len(got) != 0 {
		t.Fatalf("empty tensor gave %v", got)
	}
	p := must(m.BorrowTorch())
	wrapped := must(accel.WrapTorch(p))
	defer wrapped.Close()
	if got := must(accel.ToSlice[int32](wrapped)); !slices.Equal(got, []int32{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("wrapped tensor %v", got)
	}
}

func TestBadTensorInputIsAnError(t *testing.T) {
	begin(t)
	_, err := accel.FromSlice([]float32{1, 2, 3}, 2, 2)
	wantStatus(t, err, accel.ErrInvalidArgument)
	_, err = accel.FromBytes([]byte{1, 2, 3}, accel.DType(42), 3)
	wantStatus(t, err, accel.ErrDType, "42")
	x := must(accel.FromSlice([]float32{1, 2}))
	_, err = accel.ToSlice[int64](x)
	wantStatus(t, err, accel.ErrDType, "f32", "i64")
	f := must(accel.Scalar(float32(1.5)))
	_, err = f.Int64()
	wantStatus(t, err, accel.ErrDType)
	f.Close()
	_, err = x.Float64()
	wantStatus(t, err, accel.ErrShape)
	x.Close()
	x.Close() // idempotent
	_, err = x.Shape()
	wantStatus(t, err, accel.ErrState, "after Close")
	var zero accel.Tensor // not made by the package: an error, never a crash
	_, err = zero.Shape()
	wantStatus(t, err, accel.ErrInvalidArgument)
	zero.Close()
	var none *accel.Tensor
	_, err = none.Shape()
	wantStatus(t, err, accel.ErrInvalidArgument, "nil *accel.Tensor")
	none.Close()
	_, err = accel.WrapTorch(nil)
	wantStatus(t, err, accel.ErrInvalidArgument)
	_, err = accel.DatasetFromTensors(nil)
	wantStatus(t, err, accel.ErrInvalidArgument, "tensor 0")
}

const linearSource = `
def forward(self, x):
    return self.fc.forward(x)

def training_step(self, x, y):
    return torch.mse_loss(self.forward(x), y)

def both(self, x):
    return self.forward(x), x
`

func linearModel(t testing.TB, inputs, outputs int) *accel.Model {
	m := must(accel.NewModel())
	ok(t, m.AddLayer("fc", "linear", fmt.Sprintf("in_features=%d out_features=%d", inputs, outputs)))
	ok(t, m.Define(linearSource))
	return m
}

func TestModelsBuildCallSaveAndLoad(t *testing.T) {
	begin(t)
	m := linearModel(t, 3, 2)
	defer m.Close()
	if n := must(m.ParameterElementCount()); n != 8 {
		t.Fatalf("parameters %d", n)
	}
	names := must(m.TensorNames())
	if !slices.Equal(names, []string{"fc.weight", "fc.bias"}) {
		t.Fatalf("names %v", names)
	}
	x := must(accel.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3))
	defer x.Close()
	y := must(m.Call("forward", x))
	defer y.Close()
	if s := must(y.Shape()); !slices.Equal(s, []int64{2, 2}) {
		t.Fatalf("output shape %v", s)
	}
	outs := must(m.CallAll("both", x))
	if len(outs) != 2 {
		t.Fatalf("both gave %d tensors", len(outs))
	}
	accel.Batch(outs).Close()
	_, err := m.Call("both", x)
	wantStatus(t, err, accel.ErrInvalidArgument, "CallAll")

	path := filepath.Join(t.TempDir(), "model.pt")
	ok(t, m.SaveTorchScript(path))
	loaded := must(accel.LoadTorchScript(path))
	defer loaded.Close()
	y2 := must(loaded.Call("forward", x))
	defer y2.Close()
	if !slices.Equal(must(accel.ToSlice[float32](y)), must(accel.ToSlice[float32](y2))) {
		t.Fatal("the loaded model computes something else")
	}
	ok(t, loaded.Train(false))
	w := must(m.Tensor("fc.weight"))
	defer w.Close()
	if s := must(w.Shape()); !slices.Equal(s, []int64{2, 3}) {
		t.Fatalf("weight shape %v", s)
	}
}

func TestBadModelInputIsAnError(t *testing.T) {
	begin(t)
	m := linearModel(t, 3, 2)
	defer m.Close()
	wantStatus(t, m.AddLayer("x", "transformer", ""), accel.ErrInvalidArgument, "transformer")
	wantStatus(t, m.Define("def broken(self, x):\n    return self.nothing(x)\n"), accel.ErrInvalidArgument)
	x := must(accel.FromSlice([]float32{1, 2}, 1, 2))
	defer x.Close()
	_, err := m.Call("forward", x)
	wantStatus(t, err, accel.ErrShape)
	_, err = m.Call("no_such_method", x)
	wantStatus(t, err, accel.ErrInvalidArgument, "no_such_method")
	_, err = m.Tensor("fc.nothing")
	wantStatus(t, err, accel.ErrInvalidArgument, "fc.nothing")
	_, err = accel.LoadTorchScript(filepath.Join(t.TempDir(), "missing.pt"))
	wantStatus(t, err, accel.ErrIO, "missing.pt")
	_, err = accel.NewOptimizer(m, "lion")
	wantStatus(t, err, accel.ErrInvalidArgument, "lion")
	_, err = accel.NewOptimizer(nil, "sgd")
	wantStatus(t, err, accel.ErrInvalidArgument, "nil *accel.Model")
	_, err = m.CallAll("forward", nil)
	wantStatus(t, err, accel.ErrInvalidArgument, "tensor 0")
}

func TestOptimizersAndSchedulersStep(t *testing.T) {
	begin(t)
	m := linearModel(t, 3, 2)
	defer m.Close()
	opt := must(accel.NewOptimizer(m, "sgd"))
	defer opt.Close()
	ok(t, opt.Set("lr", 0.5))
	ok(t, opt.Set("momentum", 0.9))
	wantStatus(t, opt.Set("beta1", 0.9), accel.ErrInvalidArgument, "beta1")
	sched := must(accel.NewScheduler(opt, "step"))
	defer sched.Close()
	ok(t, sched.Set("step_size", 1))
	ok(t, sched.Set("gamma", 0.5))
	ok(t, sched.Step())
	if lr := must(sched.LR()); lr != 0.25 {
		t.Fatalf("scheduler lr %v", lr)
	}
	if lr := must(opt.LR()); lr != 0.25 {
		t.Fatalf("optimizer lr %v", lr)
	}
	ok(t, opt.SetLR(0.125))
	if lr := must(opt.LR()); lr != 0.125 {
		t.Fatalf("SetLR gave %v", lr)
	}
	ok(t, opt.Step())
	ok(t, opt.ZeroGrad())
	if skipped := must(opt.StepWasSkipped()); skipped {
		t.Fatal("a step without fp16 was skipped")
	}
	_, err := accel.NewScheduler(opt, "sawtooth")
	wantStatus(t, err, accel.ErrInvalidArgument, "sawtooth")
}
