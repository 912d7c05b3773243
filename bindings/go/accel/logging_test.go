package accel_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// textLogger is a slog text logger into buf at level, without the time and with the source's
// file name alone.
func textLogger(buf *bytes.Buffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{
		Level:     level,
		AddSource: true,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey:
				return slog.Attr{}
			case slog.SourceKey:
				src, _ := a.Value.Any().(*slog.Source)
				if src == nil {
					return slog.String(a.Key, "none")
				}
				return slog.String(a.Key, filepath.Base(src.File))
			}
			return a
		},
	}))
}

// wantLines checks buf's lines and empties it.
func wantLines(t *testing.T, buf *bytes.Buffer, want ...string) {
	t.Helper()
	got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if buf.Len() == 0 {
		got = nil
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("logged:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	buf.Reset()
}

func TestLogLevelsMapPythonsOntoSlogs(t *testing.T) {
	for python, level := range map[int]slog.Level{
		0: -8, 10: slog.LevelDebug, 19: -1, 20: slog.LevelInfo, 21: 0, 25: 2, 30: slog.LevelWarn,
		40: slog.LevelError, 50: accel.LevelCritical, 1000: 392,
	} {
		if got := accel.LevelFromPython(python); got != level {
			t.Errorf("LevelFromPython(%d) = %v, want %v", python, got, level)
		}
	}
	for level := slog.Level(-8); level <= 392; level++ {
		if back := accel.LevelFromPython(accel.LevelToPython(level)); back != level {
			t.Fatalf("%v -> %d -> %v", level, accel.LevelToPython(level), back)
		}
	}
	if accel.LevelToPython(slog.LevelWarn) != 30 || accel.LevelToPython(1) != 23 ||
		accel.LevelToPython(-100) != 0 || accel.LevelToPython(1<<40) != 1000 {
		t.Fatal("LevelToPython: WARNING, between levels, or the limits")
	}
}

// Messages reach slog with their level, text, source and rank; the accelerator's level drops
// those below it first, the handler's level after it; without SetLogger they go to
// slog.Default() as it is at each message.
func TestMessagesGoToSlogWithTheirLevelAndRank(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	if level := must(acc.LogLevel()); level != slog.LevelInfo {
		t.Fatalf("default level %v", level)
	}
	var buf bytes.Buffer
	ok(t, acc.SetLogger(textLogger(&buf, slog.LevelDebug)))
	ok(t, acc.Debug("below the accelerator's level"))
	ok(t, acc.SetLogLevel(slog.LevelDebug))
	ok(t, acc.Debug("d"))
	ok(t, acc.Info("i", accel.AllProcesses()))
	ok(t, acc.Warn("w", accel.InOrder())) // one process: written at once
	ok(t, acc.Error("e"))
	ok(t, acc.LogMessage(accel.LevelCritical, "c"))
	ok(t, acc.LogMessage(slog.LevelInfo+2, `between "info" and warning`))
	wantLines(t, &buf,
		"level=DEBUG source=logging_test.go msg=d rank=0",
		"level=INFO source=logging_test.go msg=i rank=0 processes=1",
		"level=WARN source=logging_test.go msg=w rank=0 processes=1",
		"level=ERROR source=logging_test.go msg=e rank=0",
		"level=ERROR+4 source=logging_test.go msg=c rank=0",
		`level=INFO+2 source=logging_test.go msg="between \"info\" and warning" rank=0`)

	ok(t, acc.SetLogLevel(slog.LevelInfo+2))
	if level := must(acc.LogLevel()); level != slog.LevelInfo+2 {
		t.Fatalf("level %v after SetLogLevel(INFO+2)", level)
	}
	ok(t, acc.LogMessage(slog.LevelInfo+1, "dropped"))
	ok(t, acc.LogMessage(slog.LevelInfo+2, "kept"))
	wantLines(t, &buf, "level=INFO+2 source=logging_test.go msg=kept rank=0")
	ok(t, acc.SetLogLevel(-100)) // everything: NOTSET
	if level := must(acc.LogLevel()); level != -8 {
		t.Fatalf("level %v after SetLogLevel(-100)", level)
	}

	// The handler's own level applies after the accelerator's.
	ok(t, acc.SetLogger(textLogger(&buf, slog.LevelWarn)))
	ok(t, acc.Info("below the handler's level"))
	ok(t, acc.Warn("at it"))
	wantLines(t, &buf, `level=WARN source=logging_test.go msg="at it" rank=0`)

	// No logger of its own: slog.Default(), changed after SetLogger(nil).
	var fromDefault bytes.Buffer
	oldDefault, oldOutput, oldFlags := slog.Default(), log.Writer(), log.Flags()
	defer func() {
		slog.SetDefault(oldDefault) // the log package's output is not restored by this
		log.SetOutput(oldOutput)
		log.SetFlags(oldFlags)
	}()
	ok(t, acc.SetLogger(nil))
	slog.SetDefault(textLogger(&fromDefault, slog.LevelInfo))
	if must(acc.Logger()) != slog.Default() {
		t.Fatal("Logger() is not slog.Default()")
	}
	ok(t, acc.Info("to the default logger"))
	wantLines(t, &fromDefault, `level=INFO source=logging_test.go msg="to the default logger" rank=0`)
	wantLines(t, &buf)
}

// A warning the library raises itself (a tracker's file found torn and repaired) reaches the
// program's slog logger as its own messages do, at WARN, and the accelerator's level filters it.
func TestAWarningOfTheLibraryReachesTheProgramsLogger(t *testing.T) {
	begin(t)
	dir := t.TempDir()
	ok(t, os.MkdirAll(filepath.Join(dir, "run"), 0o755))
	torn := filepath.Join(dir, "run", "metrics.jsonl")
	ok(t, os.WriteFile(torn, []byte(`{"st`), 0o644))
	acc := trackingAccelerator(t, "jsonl", dir)
	var buf bytes.Buffer
	ok(t, acc.SetLogger(textLogger(&buf, slog.LevelDebug)))
	ok(t, acc.InitTrackers("run", nil))
	ok(t, acc.EndTraining())
	said := buf.String()
	if !strings.HasPrefix(said, "level=WARN ") || !strings.Contains(said, "metrics.jsonl.torn-1") ||
		strings.Count(said, "\n") != 1 {
		t.Fatalf("logged: %q", said)
	}
	buf.Reset()
	ok(t, os.WriteFile(torn, []byte(`{"st`), 0o644))
	ok(t, acc.SetLogLevel(slog.LevelError))
	ok(t, acc.InitTrackers("run", nil))
	ok(t, acc.EndTraining())
	wantLines(t, &buf)
}

// The level comes from ACCELERATE_LOG_LEVEL, and from the configuration's log_level.
func TestTheLogLevelComesFromTheEnvironmentAndTheConfig(t *testing.T) {
	begin(t)
	t.Setenv("ACCELERATE_LOG_LEVEL", "error")
	var buf bytes.Buffer
	acc := must(accel.New(nil))
	ok(t, acc.SetLogger(textLogger(&buf, slog.LevelDebug)))
	if level := must(acc.LogLevel()); level != slog.LevelError {
		acc.Close()
		t.Fatalf("level %v under ACCELERATE_LOG_LEVEL=error", level)
	}
	ok(t, acc.Warn("dropped", accel.AllProcesses()))
	ok(t, acc.Error("kept"))
	acc.Close()
	wantLines(t, &buf, "level=ERROR source=logging_test.go msg=kept rank=0")

	cfg := must(accel.NewConfig())
	defer cfg.Close()
	ok(t, cfg.Set("log_level", "DEBUG"))
	acc = must(accel.New(cfg))
	defer acc.Close()
	if level := must(acc.LogLevel()); level != slog.LevelDebug {
		t.Fatalf("level %v with log_level DEBUG", level)
	}
	wantStatus(t, cfg.Set("log_level", "verbose"), accel.ErrConfig, "log_level")
}

// handlerFunc is a slog.Handler of its Handle alone, for every level.
type handlerFunc func(r slog.Record) error

func (h handlerFunc) Enabled(context.Context, slog.Level) bool      { return true }
func (h handlerFunc) Handle(_ context.Context, r slog.Record) error { return h(r) }
func (h handlerFunc) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h handlerFunc) WithGroup(string) slog.Handler                 { return h }

// funcLogger is a logger whose handler is f.
func funcLogger(f func(r slog.Record) error) *slog.Logger { return slog.New(handlerFunc(f)) }

var errDiskFull = errors.New("disk full")

// A failing or panicking handler is an ErrCallback with its error, a handler logging through
// its accelerator is ErrState, and nothing is left over for the next message.
func TestAFailingHandlerIsAnErrorNotACrash(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()

	ok(t, acc.SetLogger(funcLogger(func(slog.Record) error { return fmt.Errorf("write: %w", errDiskFull) })))
	err := acc.Info("lost")
	wantStatus(t, err, accel.ErrCallback, "log sink")
	if !errors.Is(err, errDiskFull) {
		t.Fatalf("the handler's error is not the cause: %v", err)
	}

	ok(t, acc.SetLogger(funcLogger(func(slog.Record) error { panic("handler bug") })))
	err = acc.Warn("lost", accel.InOrder())
	wantStatus(t, err, accel.ErrCallback)
	var p *accel.PanicError
	if !errors.As(err, &p) || p.Value != "handler bug" || len(p.Stack) == 0 {
		t.Fatalf("want the panic as the cause, got %v", err)
	}

	var inner []error
	var seen []string
	ok(t, acc.SetLogger(funcLogger(func(r slog.Record) error {
		seen = append(seen, r.Message)
		if r.Message == "outer" {
			inner = append(inner, acc.Info("inner"))
			level, err := acc.LogLevel() // queries are allowed
			inner = append(inner, err, acc.SetLogLevel(level))
		}
		return nil
	})))
	ok(t, acc.Info("outer"))
	if len(inner) != 3 || strings.Join(seen, ",") != "outer" {
		t.Fatalf("the handler saw %q and got %v", seen, inner)
	}
	wantStatus(t, inner[0], accel.ErrState, "inside the accelerator's log handler")
	ok(t, inner[1])
	ok(t, inner[2])
	ok(t, acc.Info("after"))

	// Refused arguments, handles and closed accelerators.
	wantStatus(t, acc.Info("a\x00b"), accel.ErrInvalidArgument, "NUL")
	var none *accel.Accelerator
	wantStatus(t, none.Info("x"), accel.ErrInvalidArgument, "nil *accel.Accelerator")
	wantStatus(t, none.SetLogger(nil), accel.ErrInvalidArgument, "nil *accel.Accelerator")
	wantStatus(t, none.SetLogLevel(0), accel.ErrInvalidArgument, "nil *accel.Accelerator")
	wantStatus(t, must2Err(none.LogLevel()), accel.ErrInvalidArgument, "nil *accel.Accelerator")
	acc.Close()
	wantStatus(t, acc.Error("after Close"), accel.ErrState)
	wantStatus(t, acc.SetLogger(nil), accel.ErrState)
	wantStatus(t, must2Err(acc.Logger()), accel.ErrState)
}

func must2Err[T any](_ T, err error) error { return err }

// Messages from several goroutines are written one at a time, and each call gets its own
// handler's failure, never another call's.
func TestConcurrentMessagesGetTheirOwnFailures(t *testing.T) {
	begin(t)
	acc := must(accel.New(nil))
	defer acc.Close()
	var mu sync.Mutex
	written := 0
	ok(t, acc.SetLogger(funcLogger(func(r slog.Record) error {
		mu.Lock()
		written++
		mu.Unlock()
		if strings.HasSuffix(r.Message, "odd") {
			return errors.New(r.Message)
		}
		return nil
	})))
	const goroutines, each = 4, 25
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				msg := fmt.Sprintf("%d even", g*each+i)
				if i%2 == 1 {
					msg = fmt.Sprintf("%d odd", g*each+i)
				}
				err := acc.Info(msg)
				var e *accel.Error
				if (i%2 == 0) != (err == nil) || (err != nil && (!errors.As(err, &e) || e.Cause.Error() != msg)) {
					errs <- fmt.Errorf("%s got %v", msg, err)
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
	if written != goroutines*each {
		t.Fatalf("the handler wrote %d of %d messages", written, goroutines*each)
	}
}
