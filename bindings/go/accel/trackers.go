package accel

// #include "shim.h"
import "C"

import (
	"iter"
	"runtime"
)

// Values are named values to log (Accelerate's log({"loss": 0.31, ...})) or a run's
// configuration: numbers and texts, in the order each key was first set; setting a key again
// replaces its value and keeps its place. The zero Values is empty and ready to use.
//
// Values is a plain Go value, not a handle on the library's accel_values: a program fills a new
// set at every step, and as handles each would need a Close (or wait for a cleanup) and could be
// used after it, while a tracker would get values valid during its callback only. Log and
// InitTrackers convert them for the call (a few small calls, next to a training step), and a
// tracker gets a copy of its own that it may keep. Like a map, Values may be read from several
// goroutines at once but not changed while another goroutine uses them.
type Values struct {
	entries []Value
	index   map[string]int // key -> its place in entries
}

// Value is one entry of Values: a number, or a text when IsText.
type Value struct {
	Key    string
	Number float64 // 0 for a text
	Text   string  // "" for a number
	IsText bool
}

// SetNumber sets key to number (NaN and the infinities too: the files write them as Python's
// json reads them). It returns v, so that a step's values fit on one line:
//
//	err := acc.Log(new(accel.Values).SetNumber("loss", loss).SetNumber("lr", lr), step)
//
// A key must be non-empty and without NUL bytes: Log and InitTrackers refuse others
// (ErrInvalidArgument), so that setting stays free of errors.
func (v *Values) SetNumber(key string, number float64) *Values {
	v.set(Value{Key: key, Number: number})
	return v
}

// SetText sets key to text, under SetNumber's rules. It returns v.
func (v *Values) SetText(key, text string) *Values {
	v.set(Value{Key: key, Text: text, IsText: true})
	return v
}

func (v *Values) set(e Value) {
	if i, ok := v.index[e.Key]; ok {
		v.entries[i] = e
		return
	}
	if v.index == nil {
		v.index = map[string]int{}
	}
	v.index[e.Key] = len(v.entries)
	v.entries = append(v.entries, e)
}

// Len is the number of keys set (0 for nil Values).
func (v *Values) Len() int {
	if v == nil {
		return 0
	}
	return len(v.entries)
}

// At is the value at index i in the order first set; it panics when i is out of range, as a
// slice does.
func (v *Values) At(i int) Value { return v.entries[i] }

// Get is key's value, and whether key is set.
func (v *Values) Get(key string) (Value, bool) {
	if v == nil {
		return Value{}, false
	}
	i, ok := v.index[key]
	if !ok {
		return Value{}, false
	}
	return v.entries[i], true
}

// Number is key's number; false when key is not set or holds a text.
func (v *Values) Number(key string) (float64, bool) {
	e, ok := v.Get(key)
	return e.Number, ok && !e.IsText
}

// Text is key's text; false when key is not set or holds a number.
func (v *Values) Text(key string) (string, bool) {
	e, ok := v.Get(key)
	return e.Text, ok && e.IsText
}

// All yields the values in the order first set.
func (v *Values) All() iter.Seq[Value] {
	return func(yield func(Value) bool) {
		for i := 0; i < v.Len(); i++ {
			if !yield(v.entries[i]) {
				return
			}
		}
	}
}

// toC is v as the library's accel_values for one call, and the function that frees it; nil
// Values are NULL when nilOK (InitTrackers' configuration) and ErrInvalidArgument otherwise.
func (v *Values) toC(what string, nilOK bool) (*C.accel_values, func(), error) {
	if v == nil {
		if nilOK {
			return nil, func() {}, nil
		}
		return nil, nil, newError(ErrInvalidArgument, "nil *accel.Values as %s", what)
	}
	var p *C.accel_values
	if err := call(func() C.accel_status { return C.accel_values_new(&p) }); err != nil {
		return nil, nil, err
	}
	free := func() { C.accel_values_free(p) }
	for _, e := range v.entries {
		if err := setCValue(p, e, what); err != nil {
			free()
			return nil, nil, err
		}
	}
	return p, free, nil
}

func setCValue(p *C.accel_values, e Value, what string) error {
	if e.Key == "" {
		return newError(ErrInvalidArgument, "%s: a value has an empty key", what)
	}
	key, freeKey, err := cString(e.Key, what+": the key")
	if err != nil {
		return err
	}
	defer freeKey()
	if !e.IsText {
		return call(func() C.accel_status { return C.accel_values_set_number(p, key, C.double(e.Number)) })
	}
	text, freeText, err := cString(e.Text, what+": the text of "+e.Key)
	if err != nil {
		return err
	}
	defer freeText()
	return call(func() C.accel_status { return C.accel_values_set_text(p, key, text) })
}

// valuesFromC copies the library's values (borrowed by a callback) into Values of Go's own; NULL
// is empty Values.
func valuesFromC(p *C.accel_values) (*Values, error) {
	v := &Values{}
	if p == nil {
		return v, nil
	}
	var n C.size_t
	if err := call(func() C.accel_status { return C.accel_values_count(p, &n) }); err != nil {
		return nil, err
	}
	for i := C.size_t(0); i < n; i++ {
		var key, text *C.char
		var isText C.int32_t
		var number C.double
		if err := call(func() C.accel_status {
			return C.accel_values_get(p, i, &key, &isText, &number, &text)
		}); err != nil {
			return nil, err
		}
		if isText != 0 {
			v.SetText(C.GoString(key), C.GoString(text))
		} else {
			v.SetNumber(C.GoString(key), float64(number))
		}
	}
	return v, nil
}

// NoStep is Log's step for values logged without one (Accelerate's step=None).
const NoStep int64 = -1

// Tracker is a tracker of the program's own (Accelerate's GeneralTracker): a W&B, MLflow or
// database client, given every run's values beside the files that log_with writes. Register it
// with AddTracker.
//
// Its methods run on the main process only, one at a time, on the goroutine that called
// InitTrackers (Start), Log (Log) or EndTraining (Finish); a run still started when the
// accelerator is freed is finished on the goroutine that frees it (Close, or the cleanup of an
// accelerator never closed). An error or a panic fails that call with ErrCallback naming the
// tracker, the error (a *PanicError for a panic) as its Cause. They must not call InitTrackers,
// Log or EndTraining (ErrState).
type Tracker interface {
	// Start begins a run: the project's name and the run's configuration (empty Values when
	// InitTrackers had none). When it fails, the trackers started before it are finished and
	// the run does not start.
	Start(project string, config *Values) error
	// Log receives the values of one Log call, a copy the tracker may keep, and its step
	// (NoStep: none). A failure does not keep the other trackers from getting the values.
	Log(values *Values, step int64) error
	// Finish ends the run.
	Finish() error
}

// TrackerFunc is a Tracker of its Log alone: Start and Finish do nothing.
type TrackerFunc func(values *Values, step int64) error

// Start does nothing.
func (f TrackerFunc) Start(string, *Values) error { return nil }

// Log calls f.
func (f TrackerFunc) Log(values *Values, step int64) error { return f(values, step) }

// Finish does nothing.
func (f TrackerFunc) Finish() error { return nil }

// AddTracker adds t to this accelerator's runs under name (not empty, not one of log_with's
// names, not one added already: ErrInvalidArgument), from the next InitTrackers on: while a run
// is started it is ErrState. The accelerator keeps t until it is freed, on every process (the
// others never call it: one program runs unchanged on any number of processes).
func (a *Accelerator) AddTracker(name string, t Tracker) error {
	if a == nil {
		return errNil("Accelerator")
	}
	if t == nil {
		return newError(ErrInvalidArgument, "AddTracker: nil tracker")
	}
	cname, free, err := cString(name, "the tracker's name")
	if err != nil {
		return err
	}
	defer free()
	box := newBox(&trackerState{tracker: t, slot: a.trackerSlot})
	err = a.do(func(p *C.accel_accelerator) C.accel_status { return C.goaccel_add_tracker(p, cname, box) })
	if err != nil {
		freeBox(box) // never called back after a failed registration
	}
	return err
}

// InitTrackers starts a run (Accelerate's init_trackers): it makes <logging_dir>/<project>
// (logging_dir defaults to project_dir), opens there the files of the configuration's log_with
// ("tensorboard", "jsonl", "csv", "all", or a comma-separated list; none by default), records
// config (the run's hyperparameters; nil for none) in each, then calls every added tracker's
// Start. All or nothing: a directory that cannot be made or written is ErrIO naming it (before
// training rather than at the first Log); log_with without logging_dir or project_dir is
// ErrConfig; a failing Start is ErrCallback; a project that is not one path component is
// ErrInvalidArgument; a run already started is ErrState.
//
// Only the main process writes and calls trackers: on the others InitTrackers, Log and
// EndTraining check their arguments and state and return, so one program runs unchanged on any
// number of processes. None of them is a collective.
func (a *Accelerator) InitTrackers(project string, config *Values) error {
	cproject, free, err := cString(project, "the project name")
	if err != nil {
		return err
	}
	defer free()
	cconfig, freeConfig, err := config.toC("the configuration", true)
	if err != nil {
		return err
	}
	defer freeConfig()
	return a.trackerCall("InitTrackers", func(p *C.accel_accelerator) C.accel_status {
		return C.accel_init_trackers(p, cproject, cconfig)
	})
}

// Log logs values at step (>= 0, or NoStep) to every tracker of the started run (Accelerate's
// log); each file has them, in one write, when Log returns. A failing tracker does not keep the
// others from getting the values: Log then returns the first failure, ErrIO naming a file or
// ErrCallback naming a tracker (its error the Cause, which errors.Is and errors.As reach).
// Before InitTrackers, or after EndTraining, it is ErrState.
func (a *Accelerator) Log(values *Values, step int64) error {
	cvalues, free, err := values.toC("the values", false)
	if err != nil {
		return err
	}
	defer free()
	return a.trackerCall("Log", func(p *C.accel_accelerator) C.accel_status {
		return C.accel_log(p, cvalues, C.int64_t(step))
	})
}

// EndTraining finishes the run (Accelerate's end_training): files closed, every tracker's Finish
// called, all of them even when one fails (then ErrCallback, its error the Cause). Without a
// started run it does nothing. Close ends a started run too, but nobody hears its failures
// there: call EndTraining first. A new run may start afterwards.
func (a *Accelerator) EndTraining() error {
	return a.trackerCall("EndTraining", func(p *C.accel_accelerator) C.accel_status {
		return C.accel_end_training(p)
	})
}

// trackerCall makes a call that runs trackers' callbacks (InitTrackers, Log, EndTraining).
//
// These calls are serialised here, not only in the library, so that the tracker failure slot
// holds the failures of this call alone when it is taken: under the library's lock alone, a
// goroutine's Log could take the error of another goroutine's Log that ran just after it. A
// tracker's callback that calls one of them would wait for this lock forever; the library
// forbids that call (the run would change under the call that runs the callback), and it is
// ErrState: the callback runs on the OS thread of the call that ran it, where that call's
// goroutine is locked, so the thread tells a callback's own call from another goroutine's, which
// waits its turn.
func (a *Accelerator) trackerCall(name string, f func(p *C.accel_accelerator) C.accel_status) error {
	if a == nil {
		return errNil("Accelerator")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self := uintptr(C.goaccel_thread_id())
	if a.trackerThread.Load() == self {
		return newError(ErrState,
			"%s called from inside a tracker's callback (a tracker may not call InitTrackers, Log or EndTraining)", name)
	}
	a.trackerMu.Lock()
	defer a.trackerMu.Unlock()
	a.trackerThread.Store(self)
	defer a.trackerThread.Store(0)
	return a.trackerSlot.take(a.do(f))
}
