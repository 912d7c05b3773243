package accel_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// The model of tests/mp/trainer_program.c: training_step and eval_step for the default steps,
// index (each sample's x[0], its index) for predictions that say which sample they are.
const trainerSource = `
def training_step(self, x, y):
    return torch.cross_entropy_loss(self.fc.forward(x), y)
def eval_step(self, x, y):
    logits = self.fc.forward(x)
    return torch.cross_entropy_loss(logits, y), logits.argmax(1)
def index(self, x, y):
    return x[:, 0]
`

const trainerFeatures, trainerClasses = 8, 4

// trainerLabel is sample i's class, as in trainer_program.c.
func trainerLabel(i int) int64 { return int64(i*7) % trainerClasses }

// trainerData is trainer_program.c's dataset of n samples: x[0] is the sample's index, the other
// features depend on its class.
func trainerData(t testing.TB, n int) *accel.Dataset {
	x := make([]float32, n*trainerFeatures)
	y := make([]int64, n)
	for i := 0; i < n; i++ {
		y[i] = trainerLabel(i)
		x[i*trainerFeatures] = float32(i)
		for f := 1; f < trainerFeatures; f++ {
			v := float32((i*31+f*17)%13) / 13
			if int64(f%trainerClasses) == y[i] {
				v++
			}
			x[i*trainerFeatures+f] = v
		}
	}
	tx := must(accel.FromSlice(x, int64(n), trainerFeatures))
	ty := must(accel.FromSlice(y, int64(n)))
	defer tx.Close()
	defer ty.Close()
	return must(accel.DatasetFromTensors(tx, ty))
}

// trainerRun is trainer_program.c's build(): an accelerator with gradient_accumulation_steps 2,
// seed 42, a linear 8 -> 4 model, AdamW and a linear schedule, a train and an eval dataloader.
type trainerRun struct {
	acc         *accel.Accelerator
	model       *accel.Model
	opt         *accel.Optimizer
	sched       *accel.Scheduler
	train, eval *accel.DataLoader
}

func newTrainerRun(t *testing.T, trainN, evalN int, shuffle bool) *trainerRun {
	cfg := must(accel.NewConfig())
	ok(t, cfg.Set("gradient_accumulation_steps", 2))
	r := &trainerRun{acc: must(accel.New(cfg))}
	cfg.Close()
	ok(t, r.acc.SetSeed(42, false))
	r.model = must(accel.NewModel())
	ok(t, r.model.AddLayer("fc", "linear", "in_features=8 out_features=4"))
	ok(t, r.model.Define(trainerSource))
	r.opt = must(accel.NewOptimizer(r.model, "adamw"))
	ok(t, r.opt.Set("lr", 0.01))
	r.sched = must(accel.NewScheduler(r.opt, "linear"))
	ok(t, r.sched.Set("warmup_steps", 20))
	ok(t, r.sched.Set("total_steps", 2000))
	r.train = r.loader(t, trainN, shuffle)
	r.eval = r.loader(t, evalN, false)
	t.Cleanup(r.close)
	return r
}

func (r *trainerRun) loader(t *testing.T, n int, shuffle bool) *accel.DataLoader {
	data := trainerData(t, n)
	defer data.Close()
	l := must(accel.NewDataLoader(r.acc, data))
	ok(t, l.Set("batch_size", 4))
	if shuffle {
		ok(t, l.Set("shuffle", true))
		ok(t, l.Set("seed", 7))
	}
	return l
}

// close frees everything, the accelerator last: the next test makes the process's next one.
func (r *trainerRun) close() {
	r.train.Close()
	r.eval.Close()
	r.sched.Close()
	r.opt.Close()
	r.model.Close()
	r.acc.Close()
}

func (r *trainerRun) trainer(t *testing.T, settings string) *accel.Trainer {
	tr := must(accel.NewTrainer(r.acc, r.model, r.opt, r.sched, r.train, r.eval,
		"speed_metrics=false,progress_bar=false,output_dir="+filepath.Join(t.TempDir(), "run")+","+settings))
	t.Cleanup(func() { tr.Close() }) // before the run's close: cleanups run last-in first-out
	return tr
}

// The events of trainer_program.c's events run (24 training and 10 evaluation samples, batch 4,
// accumulation 2; then evaluate and predict) with the step each saw: tests/mp/trainer_events.txt,
// which is transformers' own Trainer's (tests/mp/transformers_trainer_events.py).
func TestTrainerEventsAreTransformers(t *testing.T) {
	begin(t)
	want, err := os.ReadFile(filepath.Join(repoRoot(t), "tests/mp/trainer_events.txt"))
	ok(t, err)
	r := newTrainerRun(t, 24, 10, false)
	tr := r.trainer(t, "num_train_epochs=2,logging_steps=2,logging_first_step=true,eval_strategy=steps,"+
		"eval_steps=3,save_strategy=steps,save_steps=3,save_total_limit=2")
	var got strings.Builder
	ok(t, tr.AddCallback(accel.TrainerCallbackFunc(func(ctx *accel.TrainerContext, ev accel.TrainerEvent, _ *accel.Values) error {
		step, err := ctx.GlobalStep()
		fmt.Fprintf(&got, "%v %d\n", ev, step)
		return err
	})))
	ok(t, tr.Train())
	must(tr.Evaluate())
	ok(t, must(tr.Predict(r.eval)).Close())
	if got.String() != string(want) {
		gotLines, wantLines := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gotLines), len(wantLines)) {
			if gotLines[i] != wantLines[i] {
				t.Fatalf("line %d: %q, transformers' %q\n%s", i+1, gotLines[i], wantLines[i], got.String())
			}
		}
		t.Fatalf("%d lines, transformers' %d", len(gotLines), len(wantLines))
	}
	if must(tr.GlobalStep()) != 6 || must(tr.Epoch()) != 2 {
		t.Fatalf("global step %d, epoch %v", must(tr.GlobalStep()), must(tr.Epoch()))
	}
	if state := must(tr.StateJSON()); !strings.Contains(state, `"global_step": 6`) {
		t.Fatalf("trainer_state.json:\n%s", state)
	}
	if accel.OnStepEnd.String() != "on_step_end" || accel.TrainerEvent(99).String() != "TrainerEvent(99)" {
		t.Fatal("event names")
	}
}

// trainedWeights trains 8 steps (shuffled, accumulation 2) with step, nil for the default, and
// returns the parameters.
func trainedWeights(t *testing.T, step func(m *accel.Model) func([]*accel.Tensor) (*accel.Tensor, error)) [][]float32 {
	r := newTrainerRun(t, 96, 8, true)
	tr := r.trainer(t, "max_steps=8,max_grad_norm=1.0")
	if step != nil {
		ok(t, tr.SetTrainingStep(step(r.model)))
	}
	before := must(accel.ToSlice[float32](must(r.model.Tensor("fc.weight"))))
	ok(t, tr.Train())
	ok(t, tr.Close())
	if slices.Equal(before, must(accel.ToSlice[float32](must(r.model.Tensor("fc.weight"))))) {
		t.Fatal("the training left the weights as they were")
	}
	out := [][]float32{}
	for _, name := range []string{"fc.weight", "fc.bias"} {
		out = append(out, must(accel.ToSlice[float32](must(r.model.Tensor(name)))))
	}
	r.close()
	return out
}

// A Go step calling the model's training_step trains bitwise as the default step does.
func TestTrainerGoStepIsTheDefaultStepBitwise(t *testing.T) {
	begin(t)
	def := trainedWeights(t, nil)
	calls := 0
	mine := trainedWeights(t, func(m *accel.Model) func([]*accel.Tensor) (*accel.Tensor, error) {
		return func(batch []*accel.Tensor) (*accel.Tensor, error) {
			calls++
			if len(batch) != 2 {
				return nil, fmt.Errorf("%d fields", len(batch))
			}
			return m.Call("training_step", batch...)
		}
	})
	if calls != 16 {
		t.Fatalf("the step ran %d times, want 8 steps x 2 micro-batches", calls)
	}
	for i := range def {
		for j := range def[i] {
			if math.Float32bits(def[i][j]) != math.Float32bits(mine[i][j]) {
				t.Fatalf("parameter %d[%d]: default step %v, Go step %v", i, j, def[i][j], mine[i][j])
			}
		}
	}
}

// compute_metrics in Go gets every evaluation sample once, in order, and its metric comes back
// as eval_<name>, in Evaluate's result and in the on_evaluate values.
func TestTrainerComputeMetricsGivesEvalMetrics(t *testing.T) {
	begin(t)
	r := newTrainerRun(t, 24, 10, false)
	tr := r.trainer(t, "max_steps=2")
	var accuracy float64
	var labelsSeen []int64
	ok(t, tr.SetComputeMetrics(func(predictions, labels *accel.Tensor) (map[string]float64, error) {
		p, err := accel.ToSlice[int64](predictions)
		if err != nil {
			return nil, err
		}
		if labelsSeen, err = accel.ToSlice[int64](labels); err != nil {
			return nil, err
		}
		right := 0
		for i := range p {
			if p[i] == labelsSeen[i] {
				right++
			}
		}
		accuracy = float64(right) / float64(len(p))
		return map[string]float64{"accuracy": accuracy, "eval_samples_seen": float64(len(p))}, nil
	}))
	var onEvaluate *accel.Values
	ok(t, tr.AddCallback(accel.TrainerCallbackFunc(func(_ *accel.TrainerContext, ev accel.TrainerEvent, v *accel.Values) error {
		if ev == accel.OnEvaluate {
			onEvaluate = v
		}
		return nil
	})))
	ok(t, tr.Train())
	metrics := must(tr.Evaluate())
	want := make([]int64, 10)
	for i := range want {
		want[i] = trainerLabel(i)
	}
	if !slices.Equal(labelsSeen, want) {
		t.Fatalf("compute_metrics' labels %v, the dataset's %v", labelsSeen, want)
	}
	if metrics["eval_accuracy"] != accuracy || metrics["eval_samples_seen"] != 10 {
		t.Fatalf("metrics %v, accuracy %v", metrics, accuracy)
	}
	if _, has := metrics["eval_loss"]; !has {
		t.Fatalf("no eval_loss in %v", metrics)
	}
	if got, has := onEvaluate.Number("eval_accuracy"); !has || got != accuracy {
		t.Fatalf("on_evaluate's values %v", onEvaluate)
	}
	// The default again: the loss alone, and the epoch transformers' log adds after training.
	ok(t, tr.SetComputeMetrics(nil))
	if metrics := must(tr.Evaluate()); len(metrics) != 2 || metrics["eval_loss"] == 0 {
		t.Fatalf("without compute_metrics: %v", metrics)
	} else if _, has := metrics["epoch"]; !has {
		t.Fatalf("no epoch in %v", metrics)
	}
}

// Predict returns every sample once, in order (10 samples, batch 4: an uneven last batch), with
// a Go evaluation step that gives a tensor of the batch back as the labels.
func TestTrainerPredictReturnsEverySampleOnceInOrder(t *testing.T) {
	begin(t)
	r := newTrainerRun(t, 24, 10, false)
	tr := r.trainer(t, "")
	ok(t, tr.SetEvalStep(func(batch []*accel.Tensor) (accel.EvalOutput, error) {
		index, err := r.model.Call("index", batch...)
		return accel.EvalOutput{Predictions: index, Labels: batch[1]}, err
	}))
	p := must(tr.Predict(r.eval))
	defer p.Close()
	indices := must(accel.ToSlice[float32](p.Predictions))
	labels := must(accel.ToSlice[int64](p.Labels))
	for i := range 10 {
		if len(indices) != 10 || indices[i] != float32(i) || labels[i] != trainerLabel(i) {
			t.Fatalf("predictions %v, labels %v", indices, labels)
		}
	}
	if len(p.Metrics) != 0 {
		t.Fatalf("no loss given, no compute_metrics: metrics %v", p.Metrics)
	}

	// The default eval_step: argmax predictions, the batch's last field as labels, test_loss.
	ok(t, tr.SetEvalStep(nil))
	q := must(tr.Predict(r.eval))
	defer q.Close()
	if s := must(q.Predictions.Shape()); !slices.Equal(s, []int64{10}) {
		t.Fatalf("predictions of shape %v", s)
	}
	if _, has := q.Metrics["test_loss"]; !has {
		t.Fatalf("metrics %v", q.Metrics)
	}
}

// A callback setting should_training_stop at step 3 stops the training there.
func TestTrainerCallbackStopsTheTraining(t *testing.T) {
	begin(t)
	r := newTrainerRun(t, 24, 10, false)
	tr := r.trainer(t, "num_train_epochs=5")
	var kept *accel.TrainerContext
	var nested map[string]float64
	ok(t, tr.AddCallback(accel.TrainerCallbackFunc(func(ctx *accel.TrainerContext, ev accel.TrainerEvent, _ *accel.Values) error {
		kept = ctx
		if ev != accel.OnStepEnd {
			return nil
		}
		step, err := ctx.GlobalStep()
		if err == nil && step == 2 && nested == nil {
			nested, err = tr.Evaluate() // a callback may evaluate (accel.h)
		}
		if err != nil || step != 3 {
			return err
		}
		if err := ctx.SetControl(accel.ShouldTrainingStop, true); err != nil {
			return err
		}
		if on, err := ctx.Control(accel.ShouldTrainingStop); err != nil || !on {
			return fmt.Errorf("should_training_stop reads %v after setting it (%v)", on, err)
		}
		if epoch, err := ctx.Epoch(); err != nil || epoch != 1 {
			return fmt.Errorf("epoch %v at step 3, the end of the first epoch (%v)", epoch, err)
		}
		if state, err := ctx.StateJSON(); err != nil || !strings.Contains(state, `"global_step": 3`) {
			return fmt.Errorf("state %s (%v)", state, err)
		}
		// Failures are returned, not t.Fatal'ed: Goexit may not unwind through the library.
		if _, err := ctx.Control("should_dance"); !errors.Is(err, accel.ErrInvalidArgument) {
			return fmt.Errorf("an unknown flag gave %v", err)
		}
		return nil
	})))
	ok(t, tr.Train())
	if step := must(tr.GlobalStep()); step != 3 {
		t.Fatalf("stopped at global step %d, want 3", step)
	}
	if _, has := nested["eval_loss"]; !has {
		t.Fatalf("Evaluate from a callback gave %v", nested)
	}
	_, err := kept.GlobalStep()
	wantStatus(t, err, accel.ErrState, "after its callback returned")
}

// A panicking callback, a failing step or compute_metrics: ErrCallback naming where, with the Go
// failure as its Cause; the process goes on and so does the Trainer.
func TestTrainerFailuresOfGoFunctionsComeBackAsCauses(t *testing.T) {
	begin(t)
	r := newTrainerRun(t, 24, 10, false)
	tr := r.trainer(t, "max_steps=4")
	panicking := true
	ok(t, tr.AddCallback(accel.TrainerCallbackFunc(func(ctx *accel.TrainerContext, ev accel.TrainerEvent, _ *accel.Values) error {
		if panicking && ev == accel.OnStepEnd {
			panic("a callback's bug")
		}
		return nil
	})))
	err := tr.Train()
	wantStatus(t, err, accel.ErrCallback, "on_step_end")
	var p *accel.PanicError
	if !errors.As(err, &p) || p.Value != "a callback's bug" || len(p.Stack) == 0 {
		t.Fatalf("the cause is not the panic: %v", err)
	}
	if step := must(tr.GlobalStep()); step != 1 {
		t.Fatalf("the failing step left global step %d", step)
	}
	panicking = false

	broken := errors.New("no loss today")
	ok(t, tr.SetTrainingStep(func([]*accel.Tensor) (*accel.Tensor, error) { return nil, broken }))
	err = tr.Train()
	wantStatus(t, err, accel.ErrCallback, "training step")
	if !errors.Is(err, broken) {
		t.Fatalf("the cause is not the step's error: %v", err)
	}
	ok(t, tr.SetTrainingStep(func([]*accel.Tensor) (*accel.Tensor, error) { return nil, nil }))
	wantStatus(t, tr.Train(), accel.ErrCallback, "training step")
	var lent *accel.Tensor
	ok(t, tr.SetTrainingStep(func(batch []*accel.Tensor) (*accel.Tensor, error) {
		lent = batch[0]
		loss, err := r.model.Call("training_step", batch...)
		loss.Close()
		return loss, err // closed: not a loss
	}))
	wantStatus(t, tr.Train(), accel.ErrCallback, "training step")
	_, err = lent.Shape()
	wantStatus(t, err, accel.ErrState) // lent for the call only
	ok(t, tr.SetTrainingStep(nil))

	ok(t, tr.SetComputeMetrics(func(_, _ *accel.Tensor) (map[string]float64, error) {
		panic(broken)
	}))
	_, err = tr.Evaluate()
	wantStatus(t, err, accel.ErrCallback, "compute_metrics")
	if !errors.Is(err, broken) {
		t.Fatalf("panic(err) is not reached through the cause: %v", err)
	}
	ok(t, tr.SetComputeMetrics(nil))
	ok(t, tr.Train()) // the defaults again: on to max_steps
	if step := must(tr.GlobalStep()); step != 4 {
		t.Fatalf("global step %d after the last Train", step)
	}
}

// nil and closed handles, a second Trainer, bad settings: errors, never a crash.
func TestTrainerHandlesAndArguments(t *testing.T) {
	begin(t)
	r := newTrainerRun(t, 24, 10, false)
	_, err := accel.NewTrainer(r.acc, nil, r.opt, nil, r.train, nil, "")
	wantStatus(t, err, accel.ErrInvalidArgument, "model")
	_, err = accel.NewTrainer(nil, r.model, r.opt, nil, r.train, nil, "")
	wantStatus(t, err, accel.ErrInvalidArgument, "Accelerator")
	_, err = accel.NewTrainer(r.acc, r.model, r.opt, nil, r.train, nil, "num_train_epochs=2,colour=blue")
	wantStatus(t, err, accel.ErrInvalidArgument, "colour")
	tr := r.trainer(t, "")
	_, err = accel.NewTrainer(r.acc, r.model, r.opt, nil, r.train, nil, "")
	wantStatus(t, err, accel.ErrState) // one Trainer per accelerator
	wantStatus(t, tr.AddCallback(nil), accel.ErrInvalidArgument)
	ok(t, tr.Close())
	ok(t, tr.Close())
	wantStatus(t, tr.Train(), accel.ErrState, "after Close")
	_, err = tr.GlobalStep()
	wantStatus(t, err, accel.ErrState)
	var none *accel.Trainer
	wantStatus(t, none.Train(), accel.ErrInvalidArgument)
	_, err = (&accel.Trainer{}).Evaluate()
	wantStatus(t, err, accel.ErrInvalidArgument, "constructor")
}

// auto_find_batch_size from Go: a step failing with ErrOutOfMemory above 3 rows is tried again
// smaller (5, then 4, then 3), and the run found is bitwise the run started at 3; without the
// setting, Train's error is ErrOutOfMemory.
func TestTrainerAutoFindBatchSizeRetriesWhatRanOutOfMemory(t *testing.T) {
	begin(t)
	run := func(start int, extra string) ([]float32, int, string, error) {
		r := newTrainerRun(t, 24, 8, false)
		ok(t, r.train.Set("batch_size", start))
		tr := r.trainer(t, "max_steps=6,save_strategy=no"+extra)
		refused := 0
		ok(t, tr.SetTrainingStep(func(batch []*accel.Tensor) (*accel.Tensor, error) {
			shape, err := batch[0].Shape()
			if err != nil {
				return nil, err
			}
			if shape[0] > 3 {
				refused++
				return nil, fmt.Errorf("pretend: %w", accel.ErrOutOfMemory)
			}
			return r.model.Call("training_step", batch...)
		}))
		err := tr.Train()
		state, _ := tr.StateJSON()
		ok(t, tr.Close())
		weights := must(accel.ToSlice[float32](must(r.model.Tensor("fc.weight"))))
		r.close()
		return weights, refused, state, err
	}
	want, none, _, err := run(3, "")
	ok(t, err)
	got, refused, state, err := run(5, ",auto_find_batch_size=true")
	ok(t, err)
	if none != 0 || refused != 2 {
		t.Fatalf("refused %d and %d times, want 0 and 2 (5, then 4)", none, refused)
	}
	if !strings.Contains(state, `"train_batch_size": 3,`) {
		t.Fatalf("trainer_state: %s", state)
	}
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Fatalf("weight %d: %v started at 3, %v found", i, want[i], got[i])
		}
	}
	if _, _, _, err := run(5, ""); !errors.Is(err, accel.ErrOutOfMemory) {
		t.Fatalf("without auto_find_batch_size: %v, want ErrOutOfMemory", err)
	}
}
