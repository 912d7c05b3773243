// Command train_fashion_mnist_trainer is train_fashion_mnist through the Trainer: the same CNN,
// data, optimizer, schedule and options, with the loop, the logging, an evaluation and a
// checkpoint every epoch, the best model and resume left to accel.Trainer.
//
//	go build -o train_fashion_mnist_trainer ./examples/train_fashion_mnist_trainer
//	./train_fashion_mnist_trainer                                one process
//	accel launch -n 2 ./train_fashion_mnist_trainer              two processes, same code
//	accel launch -n 2 ./train_fashion_mnist_trainer --resume     continue from the latest checkpoint
//
// Options: --epochs N (2) --batch-size B (64, per process) --lr X (1e-3) --accum K (1) --bf16
// --max-steps S (0: whole epochs; optimizer steps) --workers W (1) --data DIR
// (/usr/share/datasets/fashion-mnist) --output-dir DIR (fashion_mnist_trainer) --resume
// (resume_from_checkpoint=latest). Single dashes work too.
//
// The same program as examples/c/train_fashion_mnist_trainer.c, with the same settings and
// results. At each epoch's end (and where --max-steps stops the last one) the Trainer evaluates on
// the 10k test images (accuracy through compute_metrics, on predictions and labels gathered from
// every process) and saves OUTPUT_DIR/checkpoint-<step> (a SaveState directory with
// trainer_state.json); save_total_limit=2 keeps the newest and the best; at the end the best
// checkpoint's model is loaded back and evaluated once more. Every 10 steps the loss, learning
// rate and epoch are logged, with the evaluations, to the trackers the configuration names
// (ACCEL_LOG_WITH=all ACCEL_LOGGING_DIR=runs: runs/train_fashion_mnist_trainer/) and through the
// accelerator's logger to log/slog (ACCELERATE_LOG_LEVEL=warning silences it); the test accuracy
// is printed on standard output. The hand-written loop does not clip gradients, so neither does
// this one (max_grad_norm=0).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// train_fashion_mnist's model, with the eval_step the Trainer calls: (loss, predictions).
const source = `
def forward(self, images):
    x = images.float().div(255.0).sub(0.2860).div(0.3530).unsqueeze(1)
    x = torch.relu(self.conv1.forward(x))
    x = torch.relu(self.conv2.forward(x))
    x = torch.max_pool2d(x, [2, 2])
    x = torch.dropout(x, 0.25, self.training)
    x = torch.flatten(x, 1)
    x = torch.relu(self.fc1.forward(x))
    x = torch.dropout(x, 0.5, self.training)
    return self.fc2.forward(x)

def training_step(self, images, labels):
    return torch.cross_entropy_loss(self.forward(images), labels.long())

def eval_step(self, images, labels):
    logits = self.forward(images)
    return torch.cross_entropy_loss(logits, labels.long()), torch.argmax(logits, 1)
`

type options struct {
	epochs, batch, accum, maxSteps, workers int64
	lr                                      float64
	bf16, resume                            bool
	data, outputDir                         string
}

func parseFlags() (options, error) {
	var o options
	flag.Int64Var(&o.epochs, "epochs", 2, "epochs to train")
	flag.Int64Var(&o.batch, "batch-size", 64, "batch size per process")
	flag.Float64Var(&o.lr, "lr", 1e-3, "peak learning rate")
	flag.Int64Var(&o.accum, "accum", 1, "gradient accumulation steps")
	flag.BoolVar(&o.bf16, "bf16", false, "bf16 mixed precision")
	flag.Int64Var(&o.maxSteps, "max-steps", 0, "stop after this many optimizer steps (0: epochs)")
	flag.StringVar(&o.data, "data", "/usr/share/datasets/fashion-mnist", "Fashion-MNIST directory")
	flag.Int64Var(&o.workers, "workers", 1, "dataloader worker threads")
	flag.StringVar(&o.outputDir, "output-dir", "fashion_mnist_trainer", "checkpoints' directory")
	flag.BoolVar(&o.resume, "resume", false, "continue from the latest checkpoint in --output-dir")
	flag.Parse()
	if flag.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", flag.Arg(0))
	}
	if o.epochs < 1 || o.batch < 1 || o.accum < 1 || o.maxSteps < 0 {
		return o, fmt.Errorf("--epochs, --batch-size and --accum must be at least 1, --max-steps >= 0")
	}
	return o, nil
}

// settings are the TrainingArguments of the C example, as the Trainer's "key=value" text.
func (o options) settings() string {
	maxSteps := o.maxSteps
	if maxSteps == 0 {
		maxSteps = -1 // whole epochs
	}
	s := fmt.Sprintf("num_train_epochs=%d,max_steps=%d,logging_steps=10,eval_strategy=epoch,"+
		"save_strategy=epoch,save_total_limit=2,load_best_model_at_end=true,"+
		"metric_for_best_model=accuracy,max_grad_norm=0,output_dir=%s", o.epochs, maxSteps, o.outputDir)
	if o.resume {
		s += ",resume_from_checkpoint=latest"
	}
	return s
}

// steps runs each function until one fails: the setup calls, without an if per line.
func steps(fs ...func() error) error {
	for _, f := range fs {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

func idxPair(dir, images, labels string) (*accel.Dataset, error) {
	return accel.DatasetFromIDX(dir+"/"+images, dir+"/"+labels)
}

// newModel is the CNN of PyTorch's MNIST example.
func newModel() (*accel.Model, error) {
	model, err := accel.NewModel()
	if err != nil {
		return nil, err
	}
	err = steps(
		func() error {
			return model.Add("conv1", accel.Conv2dOptions{InChannels: 1, OutChannels: 32, KernelSize: 3})
		},
		func() error {
			return model.Add("conv2", accel.Conv2dOptions{InChannels: 32, OutChannels: 64, KernelSize: 3})
		},
		func() error { return model.Add("fc1", accel.LinearOptions{InFeatures: 9216, OutFeatures: 128}) },
		func() error { return model.Add("fc2", accel.LinearOptions{InFeatures: 128, OutFeatures: 10}) },
		func() error { return model.Define(source) })
	if err != nil {
		model.Close()
		return nil, err
	}
	return model, nil
}

// classes reads a tensor of class indices: int64 predictions, or uint8 labels as the IDX file
// stores them.
func classes(t *accel.Tensor) ([]int64, error) {
	dtype, err := t.DType()
	if err != nil || dtype != accel.U8 {
		return accel.ToSlice[int64](t) // an error for any dtype but i64
	}
	bytes, err := accel.ToSlice[uint8](t)
	out := make([]int64, len(bytes))
	for i, b := range bytes {
		out[i] = int64(b)
	}
	return out, err
}

// accuracy is compute_metrics: the share of test images classified right ("accuracy"; logged as
// eval_accuracy). The Trainer gives every sample once, gathered from every process.
func accuracy(predictions, labels *accel.Tensor) (map[string]float64, error) {
	p, err := classes(predictions)
	if err != nil {
		return nil, err
	}
	l, err := classes(labels)
	if err != nil {
		return nil, err
	}
	if len(p) != len(l) || len(p) == 0 {
		return nil, fmt.Errorf("%d predictions for %d labels", len(p), len(l))
	}
	hits := 0
	for i := range p {
		if p[i] == l[i] {
			hits++
		}
	}
	return map[string]float64{"accuracy": float64(hits) / float64(len(p))}, nil
}

// bestCheckpoint is trainer_state.json's best_model_checkpoint, for the closing line ("none"
// if unset).
func bestCheckpoint(t *accel.Trainer) string {
	text, err := t.StateJSON()
	var state struct {
		Best *string `json:"best_model_checkpoint"`
	}
	if err != nil || json.Unmarshal([]byte(text), &state) != nil || state.Best == nil {
		return "none"
	}
	return *state.Best
}

func run(o options) error {
	cfg, err := accel.NewConfig()
	if err != nil {
		return err
	}
	err = cfg.Set("gradient_accumulation_steps", o.accum)
	if err == nil && o.bf16 {
		err = cfg.Set("mixed_precision", "bf16")
	}
	if err != nil {
		cfg.Close()
		return err
	}
	acc, err := accel.New(cfg)
	cfg.Close()
	if err != nil {
		return err
	}
	defer acc.Close()
	processes, err := acc.NumProcesses()
	if err != nil {
		return err
	}
	world := int64(processes)
	if err := acc.SetSeed(1234, false); err != nil {
		return err
	}

	model, err := newModel()
	if err != nil {
		return err
	}
	defer model.Close()
	params, err := model.ParameterElementCount()
	if err != nil {
		return err
	}

	trainSet, err := idxPair(o.data, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
	if err != nil {
		return err
	}
	defer trainSet.Close()
	testSet, err := idxPair(o.data, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
	if err != nil {
		return err
	}
	defer testSet.Close()
	train, err := accel.NewDataLoaderWith(acc, trainSet, accel.DataLoaderOptions{
		BatchSize: accel.Ptr(int(o.batch)), Shuffle: accel.Ptr(true), Seed: accel.Ptr(42),
		NumWorkers: accel.Ptr(int(o.workers)),
	})
	if err != nil {
		return err
	}
	defer train.Close()
	test, err := accel.NewDataLoaderWith(acc, testSet, // as train_fashion_mnist
		accel.DataLoaderOptions{BatchSize: accel.Ptr(100), NumWorkers: accel.Ptr(1)})
	if err != nil {
		return err
	}
	defer test.Close()

	// The optimizer updates the run makes: an epoch ends with a shorter accumulation window.
	batchesPerEpoch, err := train.BatchCount()
	if err != nil {
		return err
	}
	updates := (batchesPerEpoch + o.accum - 1) / o.accum * o.epochs
	if o.maxSteps > 0 && o.maxSteps < updates {
		updates = o.maxSteps
	}
	opt, err := accel.NewOptimizerWith(model, accel.AdamWOptions{LR: accel.Ptr(o.lr)})
	if err != nil {
		return err
	}
	defer opt.Close()
	// As train_fashion_mnist: the accelerator steps the schedule NumProcesses times a step.
	scheduled := int(updates * world)
	sched, err := accel.NewSchedulerWith(opt,
		accel.LinearSchedule{TotalSteps: scheduled, WarmupSteps: accel.Ptr(scheduled / 10)})
	if err != nil {
		return err
	}
	defer sched.Close()

	// Prepares the model, optimizer, schedule and both loaders (Prepare's order).
	trainer, err := accel.NewTrainer(acc, model, opt, sched, train, test, o.settings())
	if err != nil {
		return err
	}
	defer trainer.Close() // before the accelerator: defers run last first
	if err := trainer.SetComputeMetrics(accuracy); err != nil {
		return err
	}
	precision := ""
	if o.bf16 {
		precision = ", bf16"
	}
	if err := acc.Info(fmt.Sprintf("%d process(es), %d parameters, %d steps of %d per process%s",
		world, params, updates, o.batch, precision)); err != nil {
		return err
	}
	hparams := new(accel.Values).SetNumber("lr", o.lr).SetNumber("batch_size", float64(o.batch)).
		SetNumber("processes", float64(world)).SetNumber("gradient_accumulation_steps", float64(o.accum))
	// Before Train: a resumed run cuts the trackers' records back to its checkpoint's step.
	if err := acc.InitTrackers("train_fashion_mnist_trainer", hparams); err != nil {
		return err
	}

	if err := trainer.Train(); err != nil {
		return err
	}
	// The best checkpoint's model is back (load_best_model_at_end): its accuracy, logged too.
	metrics, err := trainer.Evaluate()
	if err != nil {
		return err
	}
	step, err := trainer.GlobalStep()
	if err != nil {
		return err
	}
	value, has := metrics["eval_accuracy"]
	if !has {
		return fmt.Errorf("no eval_accuracy in %v", slices.Sorted(maps.Keys(metrics)))
	}
	if err := acc.Printf("test accuracy %.4f after %d steps (best checkpoint: %s)",
		value, step, bestCheckpoint(trainer)); err != nil {
		return err
	}
	return steps(acc.EndTraining, acc.WaitForEveryone)
}

func main() {
	// The training stays on one OS thread: LibTorch's thread pool and the C allocator's arenas
	// are per thread (see train_fashion_mnist).
	runtime.LockOSThread()
	o, err := parseFlags()
	if err != nil {
		fmt.Fprintf(os.Stderr, "train_fashion_mnist_trainer: %v\n", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "train_fashion_mnist_trainer failed: %v\n", err)
		os.Exit(1)
	}
}
