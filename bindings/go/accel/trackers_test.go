package accel_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// trackingAccelerator is a single-process accelerator whose runs write log_with's files under
// logging_dir ("" leaves both keys at their defaults).
func trackingAccelerator(t *testing.T, logWith, loggingDir string) *accel.Accelerator {
	t.Helper()
	cfg := must(accel.NewConfig())
	defer cfg.Close()
	if logWith != "" {
		ok(t, cfg.Set("log_with", logWith))
	}
	if loggingDir != "" {
		ok(t, cfg.Set("logging_dir", loggingDir))
	}
	acc := must(accel.New(cfg))
	t.Cleanup(func() { acc.Close() })
	return acc
}

// jsonlLines are the lines of <dir>/<project>/metrics.jsonl.
func jsonlLines(t *testing.T, dir, project string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, project, "metrics.jsonl"))
	ok(t, err)
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

func TestValuesKeepTheOrderFirstSet(t *testing.T) {
	var v accel.Values // the zero Values is ready
	v.SetNumber("loss", 1).SetText("note", "a").SetNumber("lr", 0.1)
	v.SetNumber("loss", 0.5)   // replaced in place
	v.SetNumber("note", 2)     // a text becomes a number, in place
	v.SetText("lr", "decayed") // and a number a text
	var keys []string
	for e := range v.All() {
		keys = append(keys, e.Key)
	}
	if !slices.Equal(keys, []string{"loss", "note", "lr"}) || v.Len() != 3 {
		t.Fatalf("keys %v", keys)
	}
	if n, isNumber := v.Number("loss"); !isNumber || n != 0.5 {
		t.Fatalf("loss %v %v", n, isNumber)
	}
	if n, isNumber := v.Number("note"); !isNumber || n != 2 {
		t.Fatalf("note %v %v", n, isNumber)
	}
	if s, isText := v.Text("lr"); !isText || s != "decayed" {
		t.Fatalf("lr %q %v", s, isText)
	}
	if _, isText := v.Text("loss"); isText {
		t.Fatal("a number read as a text")
	}
	if _, set := v.Get("missing"); set {
		t.Fatal("a key never set")
	}
	if e := v.At(2); e.Key != "lr" || !e.IsText || e.Text != "decayed" || e.Number != 0 {
		t.Fatalf("At(2) = %+v", e)
	}
	var none *accel.Values
	if none.Len() != 0 {
		t.Fatal("nil Values are not empty")
	}
	if _, set := none.Get("x"); set {
		t.Fatal("nil Values have a key")
	}
}

// A run writes <logging_dir>/<project>/metrics.jsonl, one line a Log, and hparams.json.
func TestTrackersWriteTheRunsFiles(t *testing.T) {
	begin(t)
	dir := t.TempDir()
	acc := trackingAccelerator(t, "jsonl", dir)
	wantStatus(t, acc.Log(new(accel.Values).SetNumber("loss", 1), 0), accel.ErrState, "accel_init_trackers")
	config := new(accel.Values).SetNumber("lr", 0.5).SetText("optimizer", "sgd")
	ok(t, acc.InitTrackers("run", config))
	wantStatus(t, acc.InitTrackers("run", nil), accel.ErrState, "started already")

	ok(t, acc.Log(new(accel.Values).SetNumber("loss", 0.25).SetText("note", "warm-up"), 3))
	ok(t, acc.Log(new(accel.Values).SetNumber("loss", math.NaN()), accel.NoStep))
	// Refused, and nothing written: no values, a step below -1, bad keys and texts.
	wantStatus(t, acc.Log(nil, 1), accel.ErrInvalidArgument, "nil *accel.Values")
	wantStatus(t, acc.Log(new(accel.Values), -2), accel.ErrInvalidArgument, "step -2")
	wantStatus(t, acc.Log(new(accel.Values).SetNumber("", 1), 1), accel.ErrInvalidArgument, "empty key")
	wantStatus(t, acc.Log(new(accel.Values).SetNumber("a\x00b", 1), 1), accel.ErrInvalidArgument, "NUL")
	wantStatus(t, acc.Log(new(accel.Values).SetText("a", "b\x00"), 1), accel.ErrInvalidArgument, "NUL")
	ok(t, acc.EndTraining())
	ok(t, acc.EndTraining()) // no run: nothing to do
	wantStatus(t, acc.Log(new(accel.Values).SetNumber("loss", 1), 4), accel.ErrState)

	lines := jsonlLines(t, dir, "run")
	if len(lines) != 2 {
		t.Fatalf("metrics.jsonl has %d lines:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	var first struct {
		Step     *int64
		WallTime float64 `json:"wall_time"`
		Values   map[string]any
	}
	ok(t, json.Unmarshal([]byte(lines[0]), &first))
	if first.Step == nil || *first.Step != 3 || first.WallTime <= 0 ||
		first.Values["loss"] != 0.25 || first.Values["note"] != "warm-up" {
		t.Fatalf("first line %s", lines[0])
	}
	if strings.Index(lines[0], `"loss"`) > strings.Index(lines[0], `"note"`) {
		t.Fatalf("the values are out of order: %s", lines[0])
	}
	if !strings.Contains(lines[1], `"step": null`) || !strings.Contains(lines[1], `"loss": NaN`) {
		t.Fatalf("second line %s", lines[1])
	}
	hparams, err := os.ReadFile(filepath.Join(dir, "run", "hparams.json"))
	ok(t, err)
	if !strings.Contains(string(hparams), `"lr": 0.5`) || !strings.Contains(string(hparams), `"optimizer": "sgd"`) {
		t.Fatalf("hparams.json: %s", hparams)
	}

	// Another run after EndTraining, into the same file: appended.
	ok(t, acc.InitTrackers("run", nil))
	ok(t, acc.Log(new(accel.Values).SetNumber("loss", 0.125), 0))
	ok(t, acc.EndTraining())
	if lines := jsonlLines(t, dir, "run"); len(lines) != 3 || !strings.Contains(lines[2], `"loss": 0.125`) {
		t.Fatalf("the second run's lines:\n%s", strings.Join(lines, "\n"))
	}
}

// recorder is a tracker that writes down what it is given, and fails or panics on demand.
type recorder struct {
	events             []string
	kept               []*accel.Values
	failStart, failLog error
	failFinish         error
	panicOnLog         any
}

func describe(v *accel.Values) string {
	var parts []string
	for e := range v.All() {
		if e.IsText {
			parts = append(parts, e.Key+"="+e.Text)
		} else {
			parts = append(parts, fmt.Sprintf("%s=%g", e.Key, e.Number))
		}
	}
	return strings.Join(parts, " ")
}

func (r *recorder) Start(project string, config *accel.Values) error {
	r.events = append(r.events, "start "+project+" "+describe(config))
	return r.failStart
}

func (r *recorder) Log(values *accel.Values, step int64) error {
	r.events = append(r.events, fmt.Sprintf("log %d %s", step, describe(values)))
	r.kept = append(r.kept, values)
	if r.panicOnLog != nil {
		panic(r.panicOnLog)
	}
	return r.failLog
}

func (r *recorder) Finish() error {
	r.events = append(r.events, "finish")
	return r.failFinish
}

func wantEvents(t *testing.T, r *recorder, want ...string) {
	t.Helper()
	if !slices.Equal(r.events, want) {
		t.Fatalf("events:\n  %s\nwant:\n  %s", strings.Join(r.events, "\n  "), strings.Join(want, "\n  "))
	}
	r.events = nil
}

func TestCustomTrackersSeeStartLogAndFinishInOrder(t *testing.T) {
	begin(t)
	acc := trackingAccelerator(t, "", "") // no files: no directory needed
	rec := &recorder{}
	ok(t, acc.AddTracker("recorder", rec))
	var steps []int64
	ok(t, acc.AddTracker("steps", accel.TrackerFunc(func(_ *accel.Values, step int64) error {
		steps = append(steps, step)
		return nil
	})))
	wantStatus(t, acc.AddTracker("recorder", rec), accel.ErrInvalidArgument, "added already")
	wantStatus(t, acc.AddTracker("jsonl", rec), accel.ErrInvalidArgument, "log_with")
	wantStatus(t, acc.AddTracker("", rec), accel.ErrInvalidArgument)
	wantStatus(t, acc.AddTracker("nothing", nil), accel.ErrInvalidArgument, "nil tracker")

	ok(t, acc.InitTrackers("project", new(accel.Values).SetNumber("lr", 0.5).SetText("opt", "adam")))
	wantStatus(t, acc.AddTracker("late", rec), accel.ErrState)
	ok(t, acc.Log(new(accel.Values).SetNumber("loss", 0.25).SetText("phase", "train"), 7))
	ok(t, acc.Log(new(accel.Values).SetNumber("acc", 0.75), accel.NoStep))
	ok(t, acc.EndTraining())
	wantEvents(t, rec, "start project lr=0.5 opt=adam", "log 7 loss=0.25 phase=train", "log -1 acc=0.75", "finish")
	if !slices.Equal(steps, []int64{7, -1}) {
		t.Fatalf("the TrackerFunc got steps %v", steps)
	}
	// The values a tracker got are its own: still whole after the calls.
	if s, _ := rec.kept[0].Text("phase"); s != "train" || rec.kept[0].Len() != 2 {
		t.Fatalf("kept values %s", describe(rec.kept[0]))
	}

	// A second run, without a configuration, that Close ends.
	ok(t, acc.InitTrackers("again", nil))
	ok(t, acc.Log(new(accel.Values), 0))
	ok(t, acc.Close())
	wantEvents(t, rec, "start again ", "log 0 ", "finish")
	wantStatus(t, acc.Log(new(accel.Values), 1), accel.ErrState, "after Close")
}

// flakyError is a tracker's own error type: errors.As finds it through the library's error.
type flakyError struct{ step int64 }

func (e *flakyError) Error() string { return fmt.Sprintf("upload of step %d refused", e.step) }

var errUnreachable = errors.New("tracking server unreachable")

func TestAFailingTrackerFailsTheCallWithItsError(t *testing.T) {
	begin(t)
	dir := t.TempDir()
	acc := trackingAccelerator(t, "jsonl", dir)
	rec := &recorder{}
	ok(t, acc.AddTracker("flaky", rec))

	// Start: the run does not start.
	rec.failStart = errUnreachable
	err := acc.InitTrackers("run", nil)
	wantStatus(t, err, accel.ErrCallback, "flaky", "start")
	if !errors.Is(err, errUnreachable) {
		t.Fatalf("the Start's error is not the cause: %v", err)
	}
	wantStatus(t, acc.Log(new(accel.Values), 0), accel.ErrState)
	rec.failStart = nil
	ok(t, acc.InitTrackers("run", nil))

	// Log: the call fails with the tracker's error; the file has the line all the same.
	ok(t, acc.Log(new(accel.Values).SetNumber("loss", 1), 1))
	rec.failLog = fmt.Errorf("log: %w", &flakyError{step: 2})
	err = acc.Log(new(accel.Values).SetNumber("loss", 0.5), 2)
	e := wantStatus(t, err, accel.ErrCallback, "flaky", "log")
	var flaky *flakyError
	if !errors.As(err, &flaky) || flaky.step != 2 || !errors.Is(e.Cause, rec.failLog) {
		t.Fatalf("want the tracker's error as the cause, got %v", err)
	}
	lines := jsonlLines(t, dir, "run")
	if len(lines) != 2 || !strings.Contains(lines[1], `"step": 2`) {
		t.Fatalf("metrics.jsonl after the failing tracker:\n%s", strings.Join(lines, "\n"))
	}
	rec.failLog = nil
	ok(t, acc.Log(new(accel.Values).SetNumber("loss", 0.25), 3)) // nothing left of the failure

	// Finish: the run ends all the same.
	rec.failFinish = errUnreachable
	err = acc.EndTraining()
	wantStatus(t, err, accel.ErrCallback, "flaky", "finish")
	if !errors.Is(err, errUnreachable) {
		t.Fatalf("the Finish's error is not the cause: %v", err)
	}
	wantStatus(t, acc.Log(new(accel.Values), 4), accel.ErrState)
	if len(jsonlLines(t, dir, "run")) != 3 {
		t.Fatal("metrics.jsonl lacks a line")
	}
}

func TestAPanickingTrackerIsAnErrorNotACrash(t *testing.T) {
	begin(t)
	acc := trackingAccelerator(t, "", "")
	rec := &recorder{panicOnLog: "tracker bug"}
	ok(t, acc.AddTracker("buggy", rec))
	ok(t, acc.InitTrackers("run", nil))
	err := acc.Log(new(accel.Values).SetNumber("loss", 1), 0)
	wantStatus(t, err, accel.ErrCallback, "buggy")
	var p *accel.PanicError
	if !errors.As(err, &p) || p.Value != "tracker bug" || len(p.Stack) == 0 {
		t.Fatalf("want the panic as the cause, got %v", err)
	}
	// panic(err): errors.Is reaches the error through the *PanicError.
	rec.panicOnLog = errUnreachable
	if err := acc.Log(new(accel.Values), 1); !errors.Is(err, errUnreachable) || !errors.Is(err, accel.ErrCallback) {
		t.Fatalf("panic(err) gave %v", err)
	}
	rec.panicOnLog = nil
	ok(t, acc.Log(new(accel.Values), 2))
	ok(t, acc.EndTraining())
}

func TestBadTrackerSettingsAreErrors(t *testing.T) {
	begin(t)
	cfg := must(accel.NewConfig())
	defer cfg.Close()
	wantStatus(t, cfg.Set("log_with", "wandb"), accel.ErrConfig, "log_with", "wandb")
	ok(t, cfg.Set("log_with", "jsonl,csv"))
	// log_with without logging_dir or project_dir: nowhere to write.
	acc := must(accel.New(cfg))
	wantStatus(t, acc.InitTrackers("run", nil), accel.ErrConfig, "logging_dir")
	acc.Close()

	// A directory that cannot be made: ErrIO at InitTrackers, before training.
	blocker := filepath.Join(t.TempDir(), "a-file")
	ok(t, os.WriteFile(blocker, nil, 0o644))
	acc = trackingAccelerator(t, "jsonl", blocker)
	wantStatus(t, acc.InitTrackers("run", nil), accel.ErrIO)
	wantStatus(t, acc.Log(new(accel.Values), 0), accel.ErrState) // nothing started
	acc.Close()

	acc = trackingAccelerator(t, "jsonl", t.TempDir())
	for _, project := range []string{"", "a/b", ".."} {
		wantStatus(t, acc.InitTrackers(project, nil), accel.ErrInvalidArgument, "project")
	}
	wantStatus(t, acc.InitTrackers("a\x00b", nil), accel.ErrInvalidArgument, "NUL")
	wantStatus(t, acc.InitTrackers("run", new(accel.Values).SetNumber("", 1)), accel.ErrInvalidArgument, "empty key")

	var none *accel.Accelerator
	wantStatus(t, none.Log(new(accel.Values), 0), accel.ErrInvalidArgument, "nil *accel.Accelerator")
	wantStatus(t, none.AddTracker("x", &recorder{}), accel.ErrInvalidArgument, "nil *accel.Accelerator")
	wantStatus(t, none.EndTraining(), accel.ErrInvalidArgument, "nil *accel.Accelerator")
}

// A tracker calling back into the trackers is refused (the library forbids it), where a Log from
// another goroutine would wait its turn.
func TestATrackerMayNotCallTheTrackers(t *testing.T) {
	begin(t)
	acc := trackingAccelerator(t, "", "")
	var inner []error
	ok(t, acc.AddTracker("nested", accel.TrackerFunc(func(_ *accel.Values, step int64) error {
		inner = append(inner, acc.Log(new(accel.Values), step), acc.EndTraining())
		return nil
	})))
	ok(t, acc.InitTrackers("run", nil))
	ok(t, acc.Log(new(accel.Values), 0))
	if len(inner) != 2 {
		t.Fatalf("the tracker ran %d times", len(inner)/2)
	}
	wantStatus(t, inner[0], accel.ErrState, "Log called from inside a tracker's callback")
	wantStatus(t, inner[1], accel.ErrState, "EndTraining called from inside a tracker's callback")
	ok(t, acc.EndTraining())
}

// Logs from several goroutines each get their own tracker's error, never another call's.
func TestConcurrentLogsGetTheirOwnFailures(t *testing.T) {
	begin(t)
	acc := trackingAccelerator(t, "", "")
	var calls sync.Mutex // the tracker's own state: the library calls it one at a time anyway
	logged := 0
	ok(t, acc.AddTracker("odd", accel.TrackerFunc(func(_ *accel.Values, step int64) error {
		calls.Lock()
		logged++
		calls.Unlock()
		if step%2 == 1 {
			return &flakyError{step: step}
		}
		return nil
	})))
	ok(t, acc.InitTrackers("run", nil))
	const goroutines, each = 4, 25
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				step := int64(g*each + i)
				err := acc.Log(new(accel.Values).SetNumber("step", float64(step)), step)
				var flaky *flakyError
				switch {
				case step%2 == 0 && err != nil:
					errs <- fmt.Errorf("step %d: %v", step, err)
					return
				case step%2 == 1 && (!errors.As(err, &flaky) || flaky.step != step):
					errs <- fmt.Errorf("step %d got %v", step, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ok(t, acc.EndTraining())
	if logged != goroutines*each {
		t.Fatalf("the tracker saw %d of %d logs", logged, goroutines*each)
	}
}
