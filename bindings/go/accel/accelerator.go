package accel

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"
)

// DistributedType is how the job is distributed (Accelerate's distributed_type).
type DistributedType int32

// The distributed types libaccel runs.
const (
	DistributedNo        DistributedType = C.ACCEL_DISTRIBUTED_NO        // one process
	DistributedMultiCPU  DistributedType = C.ACCEL_DISTRIBUTED_MULTI_CPU // processes on CPUs
	DistributedMultiGPU  DistributedType = C.ACCEL_DISTRIBUTED_MULTI_GPU // processes on CUDA devices
	DistributedDeepSpeed DistributedType = C.ACCEL_DISTRIBUTED_DEEPSPEED // DeepSpeed's configuration chose a ZeRO stage
	DistributedFSDP      DistributedType = C.ACCEL_DISTRIBUTED_FSDP      // FSDP's configuration chose a ZeRO stage
)

// String is Accelerate's name: "NO", "MULTI_CPU", "MULTI_GPU", "DEEPSPEED", "FSDP".
func (d DistributedType) String() string {
	switch d {
	case DistributedNo:
		return "NO"
	case DistributedMultiCPU:
		return "MULTI_CPU"
	case DistributedMultiGPU:
		return "MULTI_GPU"
	case DistributedDeepSpeed:
		return "DEEPSPEED"
	case DistributedFSDP:
		return "FSDP"
	}
	return fmt.Sprintf("DistributedType(%d)", int32(d))
}

// Precision is a mixed precision mode.
type Precision int32

// The mixed precision modes.
const (
	PrecisionNo   Precision = C.ACCEL_PRECISION_NO
	PrecisionFP16 Precision = C.ACCEL_PRECISION_FP16
	PrecisionBF16 Precision = C.ACCEL_PRECISION_BF16
)

// String is the configuration's value: "no", "fp16", "bf16".
func (p Precision) String() string {
	switch p {
	case PrecisionNo:
		return "no"
	case PrecisionFP16:
		return "fp16"
	case PrecisionBF16:
		return "bf16"
	}
	return fmt.Sprintf("Precision(%d)", int32(p))
}

// Reduction is the element-wise reduction of Reduce.
type Reduction int32

// The reductions. Mean is the sum divided by the number of processes (floating point only).
const (
	Sum  Reduction = C.ACCEL_REDUCE_SUM
	Mean Reduction = C.ACCEL_REDUCE_MEAN
	Max  Reduction = C.ACCEL_REDUCE_MAX
	Min  Reduction = C.ACCEL_REDUCE_MIN
)

// Accelerator is the runtime of this process, Accelerate's Accelerator: its place among the
// ranks, its device, its process group. One may exist in a process at a time.
type Accelerator struct {
	h *handle[*C.accel_accelerator]
	// Fixed for the accelerator's life: read once at New.
	processIndex, localProcessIndex, numProcesses int
	isMain, isLocalMain, isLast                   bool
	device                                        string
	distributedType                               DistributedType
	mixedPrecision                                Precision
	// The failures of registered objects' callbacks (RegisterForCheckpointing).
	slot *failureSlot
	// The trackers' calls (trackers.go): their own failures, and the lock and the caller's OS
	// thread that make each failure its own call's.
	trackerSlot   *failureSlot
	trackerMu     sync.Mutex
	trackerThread atomic.Uintptr
	// The logger (logging.go): the sink's state (its slog.Logger), and as for the trackers the
	// sink's failures and the lock and the caller's OS thread that make each failure its own
	// call's.
	log       *logState
	logSlot   *failureSlot
	logMu     sync.Mutex
	logThread atomic.Uintptr
	// The Go generator SetSeed seeds (Rand): its source, reseeded in place.
	pcg *rand.PCG
	rng *rand.Rand
}

func (a *Accelerator) ref() *handle[*C.accel_accelerator] {
	if a == nil {
		return nil
	}
	return a.h.orUnopened()
}

// New creates this process's accelerator. cfg may be nil: the defaults, the environment
// (ACCELERATE_*, ACCEL_*) and ACCEL_CONFIG_FILE still apply. The process learns its place from
// the torchrun-compatible environment (RANK, WORLD_SIZE, MASTER_ADDR, ... as `accel launch`
// sets them); with several processes it meets the others, and fails with ErrRendezvous naming
// the ranks that never came.
//
// A training loop runs faster on one OS thread: LibTorch's intra-op thread pool and the C
// allocator's arenas belong to the OS thread that calls in, and a loop that Go moves between
// threads gets one of each per thread (measured: about 10 % fewer samples per second). New does
// not decide that for the caller; a program that wants it calls runtime.LockOSThread() on the
// goroutine that runs the loop (the examples do, at the top of main).
func New(cfg *Config) (*Accelerator, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	var out *C.accel_accelerator
	init := func(c *C.accel_config) error {
		return call(func() C.accel_status { return C.accel_init(c, &out) })
	}
	var err error
	if cfg == nil {
		err = init(nil)
	} else {
		err = use(cfg.ref(), "Config", init)
	}
	if err != nil {
		return nil, err
	}
	a := &Accelerator{slot: &failureSlot{}, trackerSlot: &failureSlot{}, logSlot: &failureSlot{}}
	a.pcg = rand.NewPCG(rand.Uint64(), rand.Uint64()) // unseeded until SetSeed
	a.rng = rand.New(a.pcg)
	a.h = newHandle(a, out)
	if err := a.readPlace(out); err != nil {
		a.Close()
		return nil, err
	}
	// The accelerator's messages go to log/slog (logging.go), not to standard error.
	if err := a.installLogSink(out); err != nil {
		a.Close()
		return nil, err
	}
	setLiveAccelerator(out)
	return a, nil
}

func (a *Accelerator) readPlace(p *C.accel_accelerator) error {
	var rank, local, world C.int32_t
	var isMain, isLocalMain, isLast C.bool
	var dist C.accel_distribution
	var mp C.accel_precision
	err := errors.Join(
		call(func() C.accel_status { return C.accel_process_index(p, &rank) }),
		call(func() C.accel_status { return C.accel_local_process_index(p, &local) }),
		call(func() C.accel_status { return C.accel_num_processes(p, &world) }),
		call(func() C.accel_status { return C.accel_is_main_process(p, &isMain) }),
		call(func() C.accel_status { return C.accel_is_local_main_process(p, &isLocalMain) }),
		call(func() C.accel_status { return C.accel_is_last_process(p, &isLast) }),
		call(func() C.accel_status { return C.accel_distributed_type(p, &dist) }),
		call(func() C.accel_status { return C.accel_mixed_precision(p, &mp) }))
	if err != nil {
		return err
	}
	device, err := readText(func(buf *C.char, capacity C.size_t, size *C.size_t) C.accel_status {
		return C.accel_device(p, buf, capacity, size)
	})
	if err != nil {
		return err
	}
	a.processIndex, a.localProcessIndex, a.numProcesses = int(rank), int(local), int(world)
	a.isMain, a.isLocalMain, a.isLast = bool(isMain), bool(isLocalMain), bool(isLast)
	a.device, a.distributedType, a.mixedPrecision = device, DistributedType(dist), Precision(mp)
	return nil
}

// placed checks a before a query of its place: read once at New, each still fails like every
// other call on a nil or closed accelerator.
func (a *Accelerator) placed() error {
	h := a.ref()
	if _, err := h.acquire("Accelerator"); err != nil {
		return err
	}
	h.release()
	return nil
}

// ProcessIndex is this process's global rank, 0 <= rank < NumProcesses.
func (a *Accelerator) ProcessIndex() (int, error) {
	if err := a.placed(); err != nil {
		return 0, err
	}
	return a.processIndex, nil
}

// LocalProcessIndex is this process's rank on its machine.
func (a *Accelerator) LocalProcessIndex() (int, error) {
	if err := a.placed(); err != nil {
		return 0, err
	}
	return a.localProcessIndex, nil
}

// NumProcesses is the number of processes in the job.
func (a *Accelerator) NumProcesses() (int, error) {
	if err := a.placed(); err != nil {
		return 0, err
	}
	return a.numProcesses, nil
}

// IsMainProcess reports whether this is global rank 0.
func (a *Accelerator) IsMainProcess() (bool, error) {
	if err := a.placed(); err != nil {
		return false, err
	}
	return a.isMain, nil
}

// IsLocalMainProcess reports whether this is local rank 0.
func (a *Accelerator) IsLocalMainProcess() (bool, error) {
	if err := a.placed(); err != nil {
		return false, err
	}
	return a.isLocalMain, nil
}

// Device is the device this process computes on: "cpu", "cuda:1".
func (a *Accelerator) Device() (string, error) {
	if err := a.placed(); err != nil {
		return "", err
	}
	return a.device, nil
}

// DistributedType is how the job is distributed.
func (a *Accelerator) DistributedType() (DistributedType, error) {
	if err := a.placed(); err != nil {
		return 0, err
	}
	return a.distributedType, nil
}

// MixedPrecision is the mixed precision mode in force.
func (a *Accelerator) MixedPrecision() (Precision, error) {
	if err := a.placed(); err != nil {
		return 0, err
	}
	return a.mixedPrecision, nil
}

// do runs one call with the accelerator's handle held.
func (a *Accelerator) do(f func(p *C.accel_accelerator) C.accel_status) error {
	return do(a.ref(), "Accelerator", f)
}

// EffectiveConfig is the configuration in force, as Config.Dump writes it (each setting with its
// source).
func (a *Accelerator) EffectiveConfig() (string, error) {
	var text string
	err := use(a.ref(), "Accelerator", func(p *C.accel_accelerator) (err error) {
		text, err = readText(func(buf *C.char, capacity C.size_t, size *C.size_t) C.accel_status {
			return C.accel_effective_config(p, buf, capacity, size)
		})
		return err
	})
	return text, err
}

// WaitForEveryone blocks until every rank has called it (bounded by the collective timeout).
func (a *Accelerator) WaitForEveryone() error {
	return a.do(func(p *C.accel_accelerator) C.accel_status { return C.accel_wait_for_everyone(p) })
}

// Print prints message and a newline on the local main process only (Accelerate's print).
func (a *Accelerator) Print(message string) error {
	cmsg, free, err := cString(message, "the message")
	if err != nil {
		return err
	}
	defer free()
	return a.do(func(p *C.accel_accelerator) C.accel_status { return C.accel_print(p, cmsg) })
}

// Printf is Print with fmt.Sprintf's formatting.
func (a *Accelerator) Printf(format string, args ...any) error {
	return a.Print(fmt.Sprintf(format, args...))
}

// MainProcessFirst runs f on the main process first and on the others once it is done
// (Accelerate's main_process_first): a collective, every rank calls it. The others wait even
// when f fails or panics on the main process (f's error comes first; a panic goes on after).
func (a *Accelerator) MainProcessFirst(f func() error) error {
	return a.scoped("MainProcessFirst", func(p *C.accel_accelerator) C.accel_status {
		return C.accel_main_process_first_begin(p)
	}, func(p *C.accel_accelerator) C.accel_status { return C.accel_main_process_first_end(p) }, f)
}

// EvenBatches is what JoinUnevenInputs does with the prepared dataloaders' even_batches.
type EvenBatches int32

// The choices of JoinUnevenInputs: keep each prepared dataloader's even_batches, or set it (not
// a stream's) off or on until the join ends. Join is on only with EvenBatchesOff (or a
// dataloader's own even_batches false under EvenBatchesKeep) and several processes.
const (
	EvenBatchesKeep EvenBatches = -1
	EvenBatchesOff  EvenBatches = 0
	EvenBatchesOn   EvenBatches = 1
)

// JoinUnevenInputs is Accelerate's join_uneven_inputs: it runs fn (the training loop) for ranks
// whose numbers of batches differ. A rank that runs out of batches returns from fn and keeps
// answering the others' gradient synchronisation with zero gradients (the average still divides
// by the number of processes) until every rank has returned; then every rank takes the
// parameters of the rank that made the most steps.
//
// Only the gradient synchronisation is answered: other collectives inside fn (Gather, Reduce,
// CheckTrigger) must not be called by one rank after another has returned. Several prepared
// models, or a model with buffers (batch norm), are ErrUnsupported with join on; a join inside
// another is ErrState.
//
// The end is a collective, run whatever fn does: when fn fails, its error comes first (joined
// with the end's, if that fails too); when fn panics, the panic goes on after the end.
//
//	err := acc.JoinUnevenInputs(accel.EvenBatchesOff, func() error {
//		for batch, err := range loader.All() {
//			... // forward, acc.Backward, opt.Step, opt.ZeroGrad
//		}
//		return nil
//	}) // the parameters now agree on every rank, whatever its number of steps
func (a *Accelerator) JoinUnevenInputs(evenBatches EvenBatches, fn func() error) (err error) {
	if fn == nil {
		return newError(ErrInvalidArgument, "JoinUnevenInputs: fn is nil")
	}
	if err := a.do(func(p *C.accel_accelerator) C.accel_status {
		return C.accel_join_uneven_inputs_begin(p, C.int32_t(evenBatches))
	}); err != nil {
		return err
	}
	// Deferred: also after a panic in fn (which then goes on) or runtime.Goexit.
	defer func() {
		end := a.do(func(p *C.accel_accelerator) C.accel_status { return C.accel_join_uneven_inputs_end(p) })
		if err == nil {
			err = end
		} else if end != nil {
			err = errors.Join(err, end)
		}
	}()
	return fn()
}

// SetSeed seeds LibTorch's generators, libaccel's own (data shuffling) and the accelerator's Go
// generator (Rand), as Accelerate seeds Python's random and numpy beside torch. With
// deviceSpecific the process index is added, so ranks draw different streams.
func (a *Accelerator) SetSeed(seed uint64, deviceSpecific bool) error {
	err := a.do(func(p *C.accel_accelerator) C.accel_status {
		return C.accel_set_seed(p, C.uint64_t(seed), C.bool(deviceSpecific))
	})
	if err != nil {
		return err
	}
	if deviceSpecific {
		seed += uint64(a.processIndex)
	}
	a.pcg.Seed(seed, 0)
	return nil
}

// Rand is the math/rand/v2 generator SetSeed seeds (a PCG seeded with (seed, 0)): after SetSeed
// it draws the same on every rank (unless deviceSpecific) and in every run; before, it is seeded
// at random. One generator for the accelerator's life: not for several goroutines at once.
func (a *Accelerator) Rand() *rand.Rand { return a.rng }

// Preparable is what Prepare takes: a *Model, *Optimizer, *Scheduler or *DataLoader.
type Preparable interface {
	preparable() (unsafe.Pointer, func(), error)
}

// Prepare is Accelerate's prepare: models go to the device and, with several processes, start
// from rank 0's parameters and get data-parallel gradient synchronisation; optimizers follow
// their model (prepare it in the same call or before); schedulers get Accelerate's stepping rules;
// dataloaders join the checkpoints. Everything is checked before anything is prepared. Preparing
// an object twice does nothing.
func (a *Accelerator) Prepare(objects ...Preparable) error {
	if len(objects) == 0 {
		return nil
	}
	raw := make([]unsafe.Pointer, 0, len(objects))
	for i, o := range objects {
		if o == nil {
			return newError(ErrInvalidArgument, "Prepare: object %d is nil", i)
		}
		p, release, err := o.preparable()
		if err != nil {
			return err
		}
		defer release()
		raw = append(raw, p)
	}
	// C pointers in Go memory: cgo allows it (no Go pointer is passed).
	return a.do(func(p *C.accel_accelerator) C.accel_status {
		return C.accel_prepare(p, &raw[0], C.size_t(len(raw)))
	})
}

// Accumulate opens a micro-step (Accelerate's accumulate()): with gradient_accumulation_steps K,
// gradients synchronise and optimizers step on every K-th call and on the last batch of the
// dataloader. Call it once per batch, before the forward. Accelerate's GradientAccumulationPlugin
// is the configuration's sync_each_batch (reduce gradients on every micro-step, step on sync
// steps only; false), sync_with_dataloader (the dataloader's last batch syncs; true) and
// adjust_scheduler (accepted, without effect as in Accelerate 1.15).
func (a *Accelerator) Accumulate() error {
	return a.do(func(p *C.accel_accelerator) C.accel_status { return C.accel_accumulate(p) })
}

// SyncGradients reports whether the current micro-step synchronises gradients.
func (a *Accelerator) SyncGradients() (bool, error) {
	var out C.bool
	err := a.do(func(p *C.accel_accelerator) C.accel_status { return C.accel_sync_gradients(p, &out) })
	return bool(out), err
}

// withTensor runs one call with the accelerator's and the tensor's handles held (t may be nil
// when nilOK: then the call gets NULL).
func (a *Accelerator) withTensor(t *Tensor, nilOK bool, f func(p *C.accel_accelerator, tp *C.accel_tensor) C.accel_status) error {
	if t == nil && nilOK {
		return a.do(func(p *C.accel_accelerator) C.accel_status { return f(p, nil) })
	}
	return use(t.ref(), "Tensor", func(tp *C.accel_tensor) error {
		return a.do(func(p *C.accel_accelerator) C.accel_status { return f(p, tp) })
	})
}

// Backward runs backward from a one-element loss: divided by the accumulation steps, and with
// several processes the gradients of prepared models are averaged across them while it runs.
func (a *Accelerator) Backward(loss *Tensor) error {
	return a.withTensor(loss, false, func(p *C.accel_accelerator, tp *C.accel_tensor) C.accel_status {
		return C.accel_backward(p, tp)
	})
}

// ClipGradNorm clips the gradient norm of model's parameters to maxNorm (normType 2: the
// Euclidean norm) and returns the norm before clipping.
func (a *Accelerator) ClipGradNorm(model *Model, maxNorm, normType float64) (float64, error) {
	var norm C.double
	err := use(model.ref(), "Model", func(m *C.accel_model) error {
		return a.do(func(p *C.accel_accelerator) C.accel_status {
			return C.accel_clip_grad_norm(p, m, C.double(maxNorm), C.double(normType), &norm)
		})
	})
	return float64(norm), err
}

// ClipGradValue clamps every gradient element of model to [-clipValue, clipValue].
func (a *Accelerator) ClipGradValue(model *Model, clipValue float64) error {
	return use(model.ref(), "Model", func(m *C.accel_model) error {
		return a.do(func(p *C.accel_accelerator) C.accel_status {
			return C.accel_clip_grad_value(p, m, C.double(clipValue))
		})
	})
}

// Close frees the accelerator and leaves the process group, without waiting for the other ranks
// (call WaitForEveryone first when they must all be done). Prepared objects stay valid handles;
// their calls that need the accelerator then fail with ErrState. Idempotent.
func (a *Accelerator) Close() error { return a.ref().close() }
