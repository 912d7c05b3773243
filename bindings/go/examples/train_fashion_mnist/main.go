// Command train_fashion_mnist trains PyTorch's classic MNIST CNN on Fashion-MNIST with libaccel.
//
//	go build -o train_fashion_mnist ./examples/train_fashion_mnist
//	./train_fashion_mnist                        one process
//	accel launch -n 2 ./train_fashion_mnist      two processes, same code
//
// Options: -epochs N (2) -batch-size B (64, per process) -lr X (1e-3) -accum K (1) -bf16
// -max-steps S (0: whole epochs) -data DIR (/usr/share/datasets/fashion-mnist) -workers W (1:
// batches prefetched on one thread; 0: made when asked for). Double dashes work too.
//
// The same program as examples/c/train_fashion_mnist.c, with the same model, data order, schedule
// and results: AdamW with a linear warmup/decay schedule; evaluation on the 10k test images with
// GatherForMetrics. Every 10 steps it logs loss, lr and samples/s, and at the end the test
// accuracy, to the trackers the configuration names (ACCEL_LOG_WITH=all ACCEL_LOGGING_DIR=runs:
// runs/train_fashion_mnist/; none by default). Its setup and progress lines go through the
// accelerator's logger to log/slog (slog.Default(): standard error), from the main process; the
// result line is printed on standard output.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

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

def correct(self, images, labels):
    return torch.eq(torch.argmax(self.forward(images), 1), labels.long()).long()
`

type options struct {
	epochs, batch, accum, maxSteps, workers int64
	lr                                      float64
	bf16                                    bool
	data                                    string
}

func parseFlags() options {
	var o options
	flag.Int64Var(&o.epochs, "epochs", 2, "epochs to train")
	flag.Int64Var(&o.batch, "batch-size", 64, "batch size per process")
	flag.Float64Var(&o.lr, "lr", 1e-3, "peak learning rate")
	flag.Int64Var(&o.accum, "accum", 1, "gradient accumulation steps")
	flag.BoolVar(&o.bf16, "bf16", false, "bf16 mixed precision")
	flag.Int64Var(&o.maxSteps, "max-steps", 0, "stop after this many steps (0: whole epochs)")
	flag.StringVar(&o.data, "data", "/usr/share/datasets/fashion-mnist", "Fashion-MNIST directory")
	flag.Int64Var(&o.workers, "workers", 1, "dataloader worker threads")
	flag.Parse()
	return o
}

func idxPair(dir, images, labels string) (*accel.Dataset, error) {
	return accel.DatasetFromIDX(dir+"/"+images, dir+"/"+labels)
}

// steps runs f for each value until one fails: the setup calls, without an if per line.
func steps(fs ...func() error) error {
	for _, f := range fs {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
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

	// The CNN of PyTorch's MNIST example.
	model, err := accel.NewModel()
	if err != nil {
		return err
	}
	defer model.Close()
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
		return err
	}
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
	test, err := accel.NewDataLoaderWith(acc, testSet,
		accel.DataLoaderOptions{BatchSize: accel.Ptr(100), NumWorkers: accel.Ptr(1)})
	if err != nil {
		return err
	}
	defer test.Close()
	stepsPerEpoch, err := train.BatchCount()
	if err != nil {
		return err
	}
	totalSteps := stepsPerEpoch * o.epochs
	if o.maxSteps > 0 && o.maxSteps < totalSteps {
		totalSteps = o.maxSteps
	}

	opt, err := accel.NewOptimizerWith(model, accel.AdamWOptions{LR: accel.Ptr(o.lr)})
	if err != nil {
		return err
	}
	defer opt.Close()
	// The schedule counts single-process optimizer steps: the accelerator steps it NumProcesses
	// times per step (see accel_scheduler_new), so it is written for totalSteps * world / accum.
	scheduled := int(totalSteps * world / o.accum)
	sched, err := accel.NewSchedulerWith(opt,
		accel.LinearSchedule{TotalSteps: scheduled, WarmupSteps: accel.Ptr(scheduled / 10)})
	if err != nil {
		return err
	}
	defer sched.Close()
	if err := acc.Prepare(model, opt, sched, train, test); err != nil {
		return err
	}
	precision := ""
	if o.bf16 {
		precision = ", bf16"
	}
	if err := acc.Info(fmt.Sprintf("%d process(es), %d parameters, %d steps of %d per process%s",
		world, params, totalSteps, o.batch, precision)); err != nil {
		return err
	}
	hparams := new(accel.Values).SetNumber("lr", o.lr).SetNumber("batch_size", float64(o.batch)).
		SetNumber("processes", float64(world)).SetNumber("gradient_accumulation_steps", float64(o.accum))
	if err := acc.InitTrackers("train_fashion_mnist", hparams); err != nil {
		return err
	}

	start := time.Now()
	var step int64
	var lossAvg float64
	var waited time.Duration
	for epoch := int64(0); epoch < o.epochs && step < totalSteps; epoch++ {
		if err := train.SetEpoch(epoch); err != nil {
			return err
		}
		if err := model.Train(true); err != nil {
			return err
		}
		for step < totalSteps {
			asked := time.Now()
			batch, ok, err := train.Next()
			waited += time.Since(asked) // the time this step waited for its batch
			if err != nil {
				return err
			}
			if !ok {
				break // the end of the epoch
			}
			value, err := trainStep(acc, model, opt, sched, batch)
			batch.Close()
			if err != nil {
				return err
			}
			if step == 0 {
				lossAvg = value
			} else {
				lossAvg = 0.98*lossAvg + 0.02*value
			}
			step++
			if step%10 == 0 || step == totalSteps {
				lr, err := sched.LR()
				if err != nil {
					return err
				}
				rate := float64(step*o.batch*world) / time.Since(start).Seconds()
				err = acc.Log(new(accel.Values).SetNumber("loss", lossAvg).SetNumber("lr", lr).
					SetNumber("samples_per_s", rate), step)
				if err != nil {
					return err
				}
			}
			if step%100 == 0 || step == totalSteps {
				elapsed := time.Since(start).Seconds()
				rate := float64(step*o.batch*world) / elapsed
				err := acc.Info(fmt.Sprintf("epoch %d step %d/%d loss %.4f %.0f samples/s ETA %.0fs data wait %.2f%%",
					epoch+1, step, totalSteps, lossAvg, rate,
					float64(totalSteps-step)*float64(o.batch*world)/rate, 100*waited.Seconds()/elapsed))
				if err != nil {
					return err
				}
			}
		}
	}

	// Evaluation: each test sample counted once over all processes.
	if err := model.Train(false); err != nil {
		return err
	}
	var correct, seen int64
	for batch, err := range test.All() {
		if err != nil {
			return err
		}
		hits, err := evalStep(acc, model, batch)
		if err != nil {
			return err
		}
		for _, h := range hits {
			correct += h
		}
		seen += int64(len(hits))
	}
	accuracy := float64(correct) / float64(seen)
	if err := acc.Printf("test accuracy %.4f (%d of %d) after %.1fs of training",
		accuracy, correct, seen, time.Since(start).Seconds()); err != nil {
		return err
	}
	return steps(
		func() error { return acc.Log(new(accel.Values).SetNumber("accuracy", accuracy), step) },
		acc.EndTraining,
		acc.WaitForEveryone)
}

// trainStep is one micro-step; it returns the loss.
func trainStep(acc *accel.Accelerator, model *accel.Model, opt *accel.Optimizer, sched *accel.Scheduler, batch accel.Batch) (float64, error) {
	if err := acc.Accumulate(); err != nil {
		return 0, err
	}
	loss, err := model.Call("training_step", batch...)
	if err != nil {
		return 0, err
	}
	defer loss.Close() // it holds the step's autograd graph: free it now, not at the next GC
	err = steps(
		func() error { return acc.Backward(loss) },
		opt.Step,
		sched.Step,
		opt.ZeroGrad)
	if err != nil {
		return 0, err
	}
	return loss.Float64()
}

// evalStep is 1 for every correct prediction of the batch, gathered from every process.
func evalStep(acc *accel.Accelerator, model *accel.Model, batch accel.Batch) ([]int64, error) {
	hits, err := model.Call("correct", batch...)
	if err != nil {
		return nil, err
	}
	defer hits.Close()
	return accel.TakeSlice[int64](acc.GatherForMetrics(hits)) // read, then closed
}

func main() {
	// The training loop stays on one OS thread: LibTorch's thread pool and the C allocator's
	// arenas are per thread, and a loop Go moves between threads runs about 10 % slower.
	runtime.LockOSThread()
	if err := run(parseFlags()); err != nil {
		fmt.Fprintf(os.Stderr, "train_fashion_mnist failed: %v\n", err)
		os.Exit(1)
	}
}
