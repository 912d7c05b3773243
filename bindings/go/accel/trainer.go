package accel

// #include "shim.h"
import "C"

import (
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"unsafe"
)

// TrainerEvent is one of transformers' TrainerCallback events, in the order a run reaches them.
type TrainerEvent int32

// The events (accel.h, "Trainer"). OnSubstepEnd follows each micro-batch of an accumulation
// window but its last; OnPreOptimizerStep comes after clipping; OnLog's values are the logs
// (loss, grad_norm, learning_rate, epoch; or an evaluation's metrics), OnEvaluate's and
// OnPredict's the metrics; OnPredictionStep follows each evaluation or prediction batch.
const (
	OnInitEnd          TrainerEvent = C.ACCEL_TRAINER_ON_INIT_END
	OnTrainBegin       TrainerEvent = C.ACCEL_TRAINER_ON_TRAIN_BEGIN
	OnEpochBegin       TrainerEvent = C.ACCEL_TRAINER_ON_EPOCH_BEGIN
	OnStepBegin        TrainerEvent = C.ACCEL_TRAINER_ON_STEP_BEGIN
	OnSubstepEnd       TrainerEvent = C.ACCEL_TRAINER_ON_SUBSTEP_END
	OnPreOptimizerStep TrainerEvent = C.ACCEL_TRAINER_ON_PRE_OPTIMIZER_STEP
	OnOptimizerStep    TrainerEvent = C.ACCEL_TRAINER_ON_OPTIMIZER_STEP
	OnStepEnd          TrainerEvent = C.ACCEL_TRAINER_ON_STEP_END
	OnLog              TrainerEvent = C.ACCEL_TRAINER_ON_LOG
	OnEvaluate         TrainerEvent = C.ACCEL_TRAINER_ON_EVALUATE
	OnSave             TrainerEvent = C.ACCEL_TRAINER_ON_SAVE
	OnEpochEnd         TrainerEvent = C.ACCEL_TRAINER_ON_EPOCH_END
	OnTrainEnd         TrainerEvent = C.ACCEL_TRAINER_ON_TRAIN_END
	OnPredict          TrainerEvent = C.ACCEL_TRAINER_ON_PREDICT
	OnPredictionStep   TrainerEvent = C.ACCEL_TRAINER_ON_PREDICTION_STEP
)

// String is transformers' name of the event ("on_step_end"), or "TrainerEvent(n)" for another
// value.
func (e TrainerEvent) String() string {
	if name := C.accel_trainer_event_name(C.accel_trainer_event(e)); name != nil {
		return C.GoString(name)
	}
	return fmt.Sprintf("TrainerEvent(%d)", int32(e))
}

// ControlFlag names one of transformers' TrainerControl flags.
type ControlFlag string

// The TrainerControl flags a callback reads and sets.
const (
	ShouldTrainingStop ControlFlag = "should_training_stop"
	ShouldEpochStop    ControlFlag = "should_epoch_stop"
	ShouldSave         ControlFlag = "should_save"
	ShouldEvaluate     ControlFlag = "should_evaluate"
	ShouldLog          ControlFlag = "should_log"
)

// TrainerCallback is a callback of the Trainer (transformers' TrainerCallback): OnEvent is called
// at every event, after the callbacks added before it, on the goroutine that called Train,
// Evaluate or Predict. values are the event's logs or metrics (OnLog, OnEvaluate, OnPredict), nil
// for the other events; a copy the callback may keep. An error or a panic stops the call that
// reached it with ErrCallback naming the event, the error (a *PanicError for a panic) its Cause.
// It may call the Trainer's and the accelerator's methods (Evaluate from OnStepEnd), but not
// Train nor Close.
type TrainerCallback interface {
	OnEvent(ctx *TrainerContext, event TrainerEvent, values *Values) error
}

// TrainerCallbackFunc is a TrainerCallback of one function.
type TrainerCallbackFunc func(ctx *TrainerContext, event TrainerEvent, values *Values) error

// OnEvent calls f.
func (f TrainerCallbackFunc) OnEvent(ctx *TrainerContext, event TrainerEvent, values *Values) error {
	return f(ctx, event, values)
}

// TrainerContext is what a callback reads and changes: the state (transformers' TrainerState)
// and the control flags (TrainerControl). Valid only inside the OnEvent call that received it, on
// its goroutine; afterwards its methods fail with ErrState.
type TrainerContext struct {
	p *C.accel_trainer
}

func (c *TrainerContext) trainer() (*C.accel_trainer, error) {
	if c == nil || c.p == nil {
		return nil, newError(ErrState, "a TrainerContext used after its callback returned")
	}
	return c.p, nil
}

// GlobalStep is the number of optimizer updates made (TrainerState.global_step).
func (c *TrainerContext) GlobalStep() (int64, error) {
	p, err := c.trainer()
	if err != nil {
		return 0, err
	}
	return globalStep(p)
}

// Epoch is the epochs done, as a fraction (TrainerState.epoch).
func (c *TrainerContext) Epoch() (float64, error) {
	p, err := c.trainer()
	if err != nil {
		return 0, err
	}
	return epochOf(p)
}

// StateJSON is the state as transformers' trainer_state.json.
func (c *TrainerContext) StateJSON() (string, error) {
	p, err := c.trainer()
	if err != nil {
		return "", err
	}
	return stateJSON(p)
}

// Control reads one control flag; another name is ErrInvalidArgument.
func (c *TrainerContext) Control(flag ControlFlag) (bool, error) {
	p, err := c.trainer()
	if err != nil {
		return false, err
	}
	cflag, free, err := cString(string(flag), "the control flag")
	if err != nil {
		return false, err
	}
	defer free()
	var out C.bool
	err = call(func() C.accel_status { return C.accel_trainer_control(p, cflag, &out) })
	return bool(out), err
}

// SetControl sets one control flag (what transformers' callbacks return): ShouldTrainingStop
// from OnStepEnd stops the training after this step.
func (c *TrainerContext) SetControl(flag ControlFlag, value bool) error {
	p, err := c.trainer()
	if err != nil {
		return err
	}
	cflag, free, err := cString(string(flag), "the control flag")
	if err != nil {
		return err
	}
	defer free()
	return call(func() C.accel_status { return C.accel_trainer_set_control(p, cflag, C.bool(value)) })
}

func globalStep(p *C.accel_trainer) (int64, error) {
	var out C.int64_t
	err := call(func() C.accel_status { return C.accel_trainer_global_step(p, &out) })
	return int64(out), err
}

func epochOf(p *C.accel_trainer) (float64, error) {
	var out C.double
	err := call(func() C.accel_status { return C.accel_trainer_epoch(p, &out) })
	return float64(out), err
}

func stateJSON(p *C.accel_trainer) (string, error) {
	return readText(func(buf *C.char, capacity C.size_t, size *C.size_t) C.accel_status {
		return C.accel_trainer_state_json(p, buf, capacity, size)
	})
}

// EvalOutput is an evaluation step's result: any of the loss (one number), the predictions and
// the labels of the batch (first dimension: its samples); nil gives none. The Trainer takes the
// tensors (they are closed for the program, as by Close); a tensor of the batch may be given as
// it is.
type EvalOutput struct {
	Loss, Predictions, Labels *Tensor
}

// Prediction is Predict's result: the predictions and labels of every sample once, in dataset
// order (nil when the evaluation step gave none), and the "test_" metrics.
type Prediction struct {
	Predictions, Labels *Tensor
	Metrics             map[string]float64
}

// Close closes the prediction's tensors.
func (p *Prediction) Close() error {
	if p != nil {
		p.Predictions.Close()
		p.Labels.Close()
	}
	return nil
}

// Trainer is Hugging Face transformers' Trainer over the accelerator (accel.h, "Trainer"): the
// training loop (accumulation, clipping, optimizer and scheduler steps), logging, evaluation,
// prediction, checkpoints with rotation and the best model, early stopping and exact resume, with
// transformers' callback events. One Trainer per accelerator at a time; close it before its
// accelerator. Its methods make one call at a time (calls from its own callbacks excepted).
type Trainer struct {
	h *handle[*C.accel_trainer]
	// The failures of its steps and callbacks, given to the call that reached them.
	slot *failureSlot
	// Kept reachable while the Trainer is: the accelerator's cleanup would free it under the
	// Trainer (the library holds the model, optimizer, scheduler and dataloaders itself).
	acc *Accelerator
}

func (t *Trainer) ref() *handle[*C.accel_trainer] {
	if t == nil {
		return nil
	}
	return t.h.orUnopened()
}

func (t *Trainer) failures() *failureSlot {
	if t == nil {
		return nil
	}
	return t.slot
}

// NewTrainer makes a Trainer of model with opt, sched (may be nil), the train dataloader and
// eval (may be nil; needed for evaluations) on acc. settings are transformers' TrainingArguments
// names as "key=value" text, comma- or space-separated ("num_train_epochs=2,logging_steps=10";
// "" for the defaults; accel.h lists them): an unknown key or a bad value is ErrInvalidArgument
// with TrainingArguments' message. Objects not yet prepared are prepared here as Prepare would.
// By default the steps call the model's methods: training_step(batch...) returning the loss,
// eval_step(batch...) returning (loss, predictions), the labels being the batch's last field. A
// second Trainer on the same accelerator is ErrState.
func NewTrainer(acc *Accelerator, model *Model, opt *Optimizer, sched *Scheduler, train, eval *DataLoader, settings string) (*Trainer, error) {
	objects := []Preparable{model, opt, train}
	names := []string{"model", "optimizer", "train dataloader"}
	if sched != nil {
		objects = append(objects, sched)
		names = append(names, "scheduler")
	}
	if eval != nil {
		objects = append(objects, eval)
		names = append(names, "eval dataloader")
	}
	raw := make([]unsafe.Pointer, len(objects))
	for i, o := range objects {
		if isNil(o) {
			return nil, newError(ErrInvalidArgument, "NewTrainer: the %s is nil", names[i])
		}
		p, release, err := o.preparable()
		if err != nil {
			return nil, err
		}
		defer release()
		raw[i] = p
	}
	var schedP, evalP unsafe.Pointer
	if sched != nil {
		schedP = raw[3]
	}
	if eval != nil {
		evalP = raw[len(raw)-1]
	}
	csettings, free, err := optionalCString(settings, "the settings")
	if err != nil {
		return nil, err
	}
	defer free()
	var out *C.accel_trainer
	err = acc.do(func(p *C.accel_accelerator) C.accel_status {
		return C.accel_trainer_new(p, (*C.accel_model)(raw[0]), (*C.accel_optimizer)(raw[1]),
			(*C.accel_scheduler)(schedP), (*C.accel_dataloader)(raw[2]),
			(*C.accel_dataloader)(evalP), csettings, &out)
	})
	if err != nil {
		return nil, err
	}
	t := &Trainer{slot: &failureSlot{}, acc: acc}
	t.h = newHandle(t, out)
	return t, nil
}

// isNil reports whether a Preparable holds a nil pointer (a nil *Model, ...).
func isNil(o Preparable) bool {
	switch v := o.(type) {
	case *Model:
		return v == nil
	case *Optimizer:
		return v == nil
	case *Scheduler:
		return v == nil
	case *DataLoader:
		return v == nil
	}
	return o == nil
}

// register makes one registering call with a new box of state; the box is freed when the call
// fails (the library then never calls back) and by the library's release otherwise. A nil state
// registers NULL (the default).
func (t *Trainer) register(state any, f func(p *C.accel_trainer, box *C.uintptr_t) C.accel_status) error {
	var box *C.uintptr_t
	if state != nil {
		box = newBox(state)
	}
	err := do(t.ref(), "Trainer", func(p *C.accel_trainer) C.accel_status { return f(p, box) })
	if err != nil && box != nil {
		freeBox(box)
	}
	return err
}

// SetTrainingStep replaces the training step: step gets the micro-batch's fields and returns its
// loss, a one-element tensor with its graph (model.Call("training_step", batch...) is the
// default), which the Trainer takes (with the setting num_items_in_batch the batch has one more
// field, the window's label-token count, and the loss is the sum over tokens divided by it). The
// batch's tensors are lent for the call: valid inside it only, closed afterwards (Close on them
// does nothing to the batch). nil restores the default. An error or a panic stops the training
// with ErrCallback, its Cause the error (a *PanicError).
func (t *Trainer) SetTrainingStep(step func(batch []*Tensor) (*Tensor, error)) error {
	var state any
	if step != nil {
		state = &trainingStepState{fn: step, slot: t.failures()}
	}
	return t.register(state, func(p *C.accel_trainer, box *C.uintptr_t) C.accel_status {
		return C.goaccel_trainer_set_training_step(p, box)
	})
}

// SetEvalStep replaces the evaluation step, called under no-grad with the model in eval mode:
// it returns any of the batch's loss, predictions and labels (EvalOutput), which the Trainer
// takes; a tensor of the batch (lent as for SetTrainingStep) may be returned as it is. nil
// restores the default (the model's eval_step).
func (t *Trainer) SetEvalStep(step func(batch []*Tensor) (EvalOutput, error)) error {
	var state any
	if step != nil {
		state = &evalStepState{fn: step, slot: t.failures()}
	}
	return t.register(state, func(p *C.accel_trainer, box *C.uintptr_t) C.accel_status {
		return C.goaccel_trainer_set_eval_step(p, box)
	})
}

// SetComputeMetrics sets transformers' compute_metrics: fn gets the predictions and labels of
// every evaluation sample once, gathered from every process in dataset order (lent for the call),
// and returns metrics by name; each gets the "eval_" (Evaluate) or "test_" (Predict) prefix
// unless it has it. Called on every process; as in transformers, not when the steps gave no
// predictions or no labels. nil: none (an evaluation gives its loss alone).
func (t *Trainer) SetComputeMetrics(fn func(predictions, labels *Tensor) (map[string]float64, error)) error {
	var state any
	if fn != nil {
		state = &metricsState{fn: fn, slot: t.failures()}
	}
	return t.register(state, func(p *C.accel_trainer, box *C.uintptr_t) C.accel_status {
		return C.goaccel_trainer_set_compute_metrics(p, box)
	})
}

// AddCallback adds cb, called after the callbacks added before it at every event. OnInitEnd
// reaches the callbacks added before the first Train, Evaluate or Predict, once. The Trainer
// keeps cb until it is closed.
func (t *Trainer) AddCallback(cb TrainerCallback) error {
	if cb == nil {
		return newError(ErrInvalidArgument, "AddCallback: nil callback")
	}
	return t.register(&trainerCallbackState{cb: cb, slot: t.failures()}, func(p *C.accel_trainer, box *C.uintptr_t) C.accel_status {
		return C.goaccel_trainer_add_callback(p, box)
	})
}

// Train is transformers' Trainer.train: from the start, or with resume_from_checkpoint from
// that checkpoint. A step's or callback's failure is ErrCallback naming where, its error the
// Cause; any failure leaves the objects where the failing step left them (the last checkpoint
// is intact). A collective: every process calls it.
func (t *Trainer) Train() error {
	return t.failures().take(do(t.ref(), "Trainer", func(p *C.accel_trainer) C.accel_status {
		return C.accel_trainer_train(p)
	}))
}

// Evaluate is transformers' Trainer.evaluate over the eval dataloader: "eval_loss" (the mean
// over samples of the steps' losses) and compute_metrics' metrics, logged (the state's
// log_history, the trackers) and given to OnEvaluate.
func (t *Trainer) Evaluate() (map[string]float64, error) {
	var out *C.accel_values
	err := do(t.ref(), "Trainer", func(p *C.accel_trainer) C.accel_status {
		return C.accel_trainer_evaluate(p, &out)
	})
	if err != nil {
		return nil, t.failures().take(err)
	}
	return takeMetrics(out)
}

// Predict is transformers' Trainer.predict over loader (prepared on the accelerator): the
// predictions and labels of every sample once, in dataset order, on every process, and the
// "test_" metrics. Close the Prediction's tensors when done.
func (t *Trainer) Predict(loader *DataLoader) (*Prediction, error) {
	var predictions, labels *C.accel_tensor
	var metrics *C.accel_values
	err := use(loader.ref(), "DataLoader", func(l *C.accel_dataloader) error {
		return do(t.ref(), "Trainer", func(p *C.accel_trainer) C.accel_status {
			return C.accel_trainer_predict(p, l, &predictions, &labels, &metrics)
		})
	})
	if err != nil {
		return nil, t.failures().take(err)
	}
	out := &Prediction{}
	if predictions != nil {
		out.Predictions = newTensor(predictions)
	}
	if labels != nil {
		out.Labels = newTensor(labels)
	}
	if out.Metrics, err = takeMetrics(metrics); err != nil {
		out.Close()
		return nil, err
	}
	return out, nil
}

// takeMetrics reads and frees the library's metrics.
func takeMetrics(p *C.accel_values) (map[string]float64, error) {
	defer C.accel_values_free(p)
	v, err := valuesFromC(p)
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64, v.Len())
	for e := range v.All() {
		out[e.Key] = e.Number
	}
	return out, nil
}

// GlobalStep is the number of optimizer updates made (TrainerState.global_step).
func (t *Trainer) GlobalStep() (int64, error) {
	v, err := query(t.ref(), "Trainer", func(p *C.accel_trainer, out *C.int64_t) C.accel_status {
		return C.accel_trainer_global_step(p, out)
	})
	return int64(v), err
}

// Epoch is the epochs done, as a fraction (0 before training).
func (t *Trainer) Epoch() (float64, error) {
	v, err := query(t.ref(), "Trainer", func(p *C.accel_trainer, out *C.double) C.accel_status {
		return C.accel_trainer_epoch(p, out)
	})
	return float64(v), err
}

// StateJSON is the state as transformers' trainer_state.json text (what each checkpoint holds).
func (t *Trainer) StateJSON() (string, error) {
	var text string
	err := use(t.ref(), "Trainer", func(p *C.accel_trainer) (err error) {
		text, err = stateJSON(p)
		return err
	})
	return text, err
}

// Close frees the Trainer and drops its steps and callbacks. Idempotent; safe from any
// goroutine (a call running finishes first), but not from the Trainer's own callbacks.
func (t *Trainer) Close() error { return t.ref().close() }

// ---- the callbacks' Go side ----------------------------------------------------------------

// lentTensors are the tensors the library lends a callback (a batch, compute_metrics'
// arguments): Tensors that never free their handle. Each holds a use of its handle from the
// start, so neither Close nor a cleanup frees it; end closes them when the callback returns,
// and the use is never released (later calls fail with ErrState).
type lentTensors []*Tensor

func lend(ptrs []*C.accel_tensor) lentTensors {
	out := make(lentTensors, len(ptrs))
	for i, p := range ptrs {
		if p != nil {
			out[i] = &Tensor{h: &handle[*C.accel_tensor]{state: openBit | 2, ptr: p}}
		}
	}
	return out
}

func (l lentTensors) end() {
	for _, t := range l {
		if t != nil {
			t.h.close() // the held use keeps close from freeing
		}
	}
}

// give is the handle to hand the library for t, a step's result: a tensor of the batch as it
// is, or t's own handle, taken from t (closed for the program without being freed).
func (l lentTensors) give(t *Tensor, what string) (*C.accel_tensor, error) {
	if t == nil {
		return nil, newError(ErrInvalidArgument, "%s is a nil *accel.Tensor", what)
	}
	if slices.Contains(l, t) {
		return t.h.ptr, nil
	}
	h := t.ref()
	for {
		s := atomic.LoadInt64(&h.state)
		switch {
		case s&openBit == 0:
			e := h.notOpen("Tensor").(*Error)
			return nil, newError(e.Status, "%s: %s", what, e.Message)
		case s != openBit:
			return nil, newError(ErrState, "%s is in use by another call (or lent by another callback)", what)
		case atomic.CompareAndSwapInt64(&h.state, s, 0):
			return h.ptr, nil
		}
	}
}

type trainingStepState struct {
	fn   func(batch []*Tensor) (*Tensor, error)
	slot *failureSlot
}

//export goaccelTrainingStep
func goaccelTrainingStep(batch **C.accel_tensor, count C.size_t, outLoss **C.accel_tensor, userData unsafe.Pointer) C.int32_t {
	state := boxValue(userData).(*trainingStepState)
	lent := lend(unsafe.Slice(batch, int(count)))
	defer lent.end()
	return state.slot.runPassingOutOfMemory(func() error {
		loss, err := state.fn(lent)
		if err != nil {
			loss.Close()
			return err
		}
		if loss == nil {
			return newError(ErrInvalidArgument, "the training step returned no loss and no error")
		}
		p, err := lent.give(loss, "the training step's loss")
		if err != nil {
			return err
		}
		*outLoss = p // the library frees it
		return nil
	})
}

type evalStepState struct {
	fn   func(batch []*Tensor) (EvalOutput, error)
	slot *failureSlot
}

//export goaccelEvalStep
func goaccelEvalStep(batch **C.accel_tensor, count C.size_t, outLoss, outPredictions, outLabels **C.accel_tensor, userData unsafe.Pointer) C.int32_t {
	state := boxValue(userData).(*evalStepState)
	lent := lend(unsafe.Slice(batch, int(count)))
	defer lent.end()
	return state.slot.runPassingOutOfMemory(func() error {
		out, err := state.fn(lent)
		// What is not given below is closed here (a given tensor's Close does nothing): the
		// library frees what it was given, also when this step fails.
		defer closeAll([]*Tensor{out.Loss, out.Predictions, out.Labels})
		if err != nil {
			return err
		}
		for _, o := range []struct {
			t    *Tensor
			into **C.accel_tensor
			what string
		}{{out.Loss, outLoss, "the loss"}, {out.Predictions, outPredictions, "the predictions"}, {out.Labels, outLabels, "the labels"}} {
			if o.t == nil {
				continue
			}
			p, err := lent.give(o.t, "the evaluation step's "+o.what)
			if err != nil {
				return err
			}
			*o.into = p
		}
		return nil
	})
}

type metricsState struct {
	fn   func(predictions, labels *Tensor) (map[string]float64, error)
	slot *failureSlot
}

//export goaccelComputeMetrics
func goaccelComputeMetrics(predictions, labels *C.accel_tensor, metrics *C.accel_values, userData unsafe.Pointer) C.int32_t {
	state := boxValue(userData).(*metricsState)
	lent := lend([]*C.accel_tensor{predictions, labels})
	defer lent.end()
	return state.slot.runPassingOutOfMemory(func() error {
		m, err := state.fn(lent[0], lent[1])
		if err != nil {
			return err
		}
		var v Values
		for _, k := range slices.Sorted(maps.Keys(m)) {
			v.SetNumber(k, m[k])
		}
		for _, e := range v.entries {
			if err := setCValue(metrics, e, "compute_metrics"); err != nil {
				return err
			}
		}
		return nil
	})
}

type trainerCallbackState struct {
	cb   TrainerCallback
	slot *failureSlot
}

//export goaccelTrainerEvent
func goaccelTrainerEvent(trainer *C.accel_trainer, event C.accel_trainer_event, values *C.accel_values, userData unsafe.Pointer) C.int32_t {
	state := boxValue(userData).(*trainerCallbackState)
	ctx := &TrainerContext{p: trainer}
	defer func() { ctx.p = nil }() // the library's trainer is lent for this call
	return state.slot.runPassingOutOfMemory(func() error {
		var v *Values
		if values != nil {
			var err error
			if v, err = valuesFromC(values); err != nil {
				return err
			}
		}
		return state.cb.OnEvent(ctx, TrainerEvent(event), v)
	})
}
