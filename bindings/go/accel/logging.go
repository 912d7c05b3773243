package accel

// #include "shim.h"
import "C"

import (
	"context"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"
)

// Logging: Accelerate's get_logger(...).log(level, msg, main_process_only=..., in_order=...),
// written through log/slog.
//
// Every accelerator New makes routes its messages to a *slog.Logger: slog.Default() at the time
// of each message, or the one SetLogger set. A record carries the message, its level mapped to
// slog's (see LevelFromPython), the attribute "rank" (the process index of the rank writing it)
// and, for a message of every process, "processes" (the number of processes). Two levels apply:
// the accelerator's (SetLogLevel; the configuration's log_level, ACCELERATE_LOG_LEVEL; info by
// default), the same on every rank, which drops a message before anything else, and then the
// handler's own, as for any record.

// LevelCritical is the level of Python's CRITICAL (Accelerate's logger.critical): above
// slog.LevelError.
const LevelCritical = slog.LevelError + 4

// LevelFromPython is the slog level of a level of Python's logging, the numbers of the library
// (accel_log_level): DEBUG 10, INFO 20, WARNING 30, ERROR 40 and CRITICAL 50 are slog's Debug,
// Info, Warn, Error and LevelCritical, and the numbers between them are spread linearly (level 25
// is slog.Level(2)), rounding down.
func LevelFromPython(level int) slog.Level {
	return slog.Level(floorDiv(int64(level-20)*2, 5))
}

// LevelToPython is the inverse of LevelFromPython, rounding up (so that LevelFromPython gives
// back level), limited to the library's range 0..1000 (slog.Level(-8) to slog.Level(392)).
func LevelToPython(level slog.Level) int {
	l := min(max(int64(level), -8), 392)
	return int(20 + floorDiv(5*l+1, 2))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// LogOption chooses which processes write a message: AllProcesses or InOrder. Without one, the
// main process alone writes (Accelerate's main_process_only=True).
type LogOption struct{ flags uint32 }

// AllProcesses has every process write the message, each with its rank (Accelerate's
// main_process_only=False).
func AllProcesses() LogOption { return LogOption{C.ACCEL_LOG_ALL_PROCESSES} }

// InOrder has every process write the message, one after the other in rank order (Accelerate's
// main_process_only=False, in_order=True): a collective, which every rank calls, with a barrier
// after each rank's turn (bounded by the collective timeout).
func InOrder() LogOption { return LogOption{C.ACCEL_LOG_ALL_PROCESSES | C.ACCEL_LOG_IN_ORDER} }

// logState is what the accelerator's log sink needs. Like trackerState it must not reach the
// Accelerator: the library holds its box until the accelerator is freed.
type logState struct {
	logger    atomic.Pointer[slog.Logger] // nil: slog.Default() at each message
	processes int
	slot      *failureSlot
	// The program counter of the call that logs the message (the record's source, for a
	// handler with AddSource): written and read under the accelerator's logMu.
	pc uintptr
}

// write is the sink: one record to the logger's handler, as slog.Logger.Log makes it.
func (s *logState) write(level C.accel_log_level, rank C.int32_t, flags C.accel_log_flags, message *C.char) error {
	logger := s.logger.Load()
	if logger == nil {
		logger = slog.Default()
	}
	ctx := context.Background()
	l := LevelFromPython(int(level))
	h := logger.Handler()
	if !h.Enabled(ctx, l) {
		return nil
	}
	r := slog.NewRecord(time.Now(), l, C.GoString(message), s.pc)
	r.AddAttrs(slog.Int("rank", int(rank)))
	if flags&C.ACCEL_LOG_ALL_PROCESSES != 0 {
		r.AddAttrs(slog.Int("processes", s.processes))
	}
	return h.Handle(ctx, r)
}

// installLogSink makes logger the destination of the accelerator's messages (New, before the
// accelerator is shared).
func (a *Accelerator) installLogSink(p *C.accel_accelerator) error {
	a.log = &logState{processes: a.numProcesses, slot: a.logSlot}
	box := newBox(a.log)
	if err := call(func() C.accel_status { return C.goaccel_set_log_sink(p, box) }); err != nil {
		freeBox(box) // never called back after a failed registration
		return err
	}
	return nil
}

// SetLogger sends the accelerator's messages to logger (its handler and its level filter);
// nil: to slog.Default() at the time of each message, as at New.
func (a *Accelerator) SetLogger(logger *slog.Logger) error {
	if err := a.placed(); err != nil {
		return err
	}
	a.log.logger.Store(logger)
	return nil
}

// Logger is where the accelerator's messages go now: SetLogger's logger, or slog.Default().
func (a *Accelerator) Logger() (*slog.Logger, error) {
	if err := a.placed(); err != nil {
		return nil, err
	}
	if l := a.log.logger.Load(); l != nil {
		return l, nil
	}
	return slog.Default(), nil
}

// LogLevel is the accelerator's level: messages below it are dropped on every rank. It starts
// at the configuration's log_level (ACCELERATE_LOG_LEVEL; info by default).
func (a *Accelerator) LogLevel() (slog.Level, error) {
	var out C.accel_log_level
	err := a.do(func(p *C.accel_accelerator) C.accel_status { return C.accel_get_log_level(p, &out) })
	return LevelFromPython(int(out)), err
}

// SetLogLevel sets the accelerator's level (limited to slog.Level(-8), which lets everything
// through, and slog.Level(392)). The handler's own level still applies after it: a debug message
// needs both at slog.LevelDebug or below.
func (a *Accelerator) SetLogLevel(level slog.Level) error {
	return a.do(func(p *C.accel_accelerator) C.accel_status {
		return C.accel_set_log_level(p, C.accel_log_level(LevelToPython(level)))
	})
}

// LogMessage logs msg at level (Accelerate's logger.log): from the main process only, or with
// AllProcesses from every process, or with InOrder from every process in rank order. A message
// below the accelerator's level (LogLevel) is dropped on every rank; one that passes goes to the
// logger (SetLogger) as a record with the attribute "rank" (and "processes" for a message of
// every process). On a process that does not write, LogMessage checks its arguments and returns.
//
// A handler's error, or its panic (a *PanicError), fails the call with ErrCallback, the error
// its Cause. A handler that logs through the same accelerator gets ErrState (it would wait for
// itself). Calls from several goroutines are written one at a time.
func (a *Accelerator) LogMessage(level slog.Level, msg string, opts ...LogOption) error {
	return a.logAt(level, msg, opts)
}

// Debug is LogMessage at slog.LevelDebug.
func (a *Accelerator) Debug(msg string, opts ...LogOption) error {
	return a.logAt(slog.LevelDebug, msg, opts)
}

// Info is LogMessage at slog.LevelInfo.
func (a *Accelerator) Info(msg string, opts ...LogOption) error {
	return a.logAt(slog.LevelInfo, msg, opts)
}

// Warn is LogMessage at slog.LevelWarn.
func (a *Accelerator) Warn(msg string, opts ...LogOption) error {
	return a.logAt(slog.LevelWarn, msg, opts)
}

// Error is LogMessage at slog.LevelError.
func (a *Accelerator) Error(msg string, opts ...LogOption) error {
	return a.logAt(slog.LevelError, msg, opts)
}

// logAt is LogMessage for its callers above, which call it directly: the record's source is
// the caller of LogMessage or of a shorthand, two frames up.
func (a *Accelerator) logAt(level slog.Level, msg string, opts []LogOption) error {
	if a == nil {
		return errNil("Accelerator")
	}
	var flags uint32
	for _, o := range opts {
		flags |= o.flags
	}
	cmsg, free, err := cString(msg, "the message")
	if err != nil {
		return err
	}
	defer free()
	var pcs [1]uintptr
	runtime.Callers(3, pcs[:]) // runtime.Callers, logAt, LogMessage or a shorthand
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self := uintptr(C.goaccel_thread_id())
	if a.logThread.Load() == self {
		return newError(ErrState,
			"a message logged from inside the accelerator's log handler (a slog.Handler may not log through the accelerator it writes for)")
	}
	// As trackerCall: one call at a time here, so that the failure slot holds this call's
	// handler failure alone, and the source is this call's.
	a.logMu.Lock()
	defer a.logMu.Unlock()
	a.logThread.Store(self)
	defer a.logThread.Store(0)
	if a.log != nil {
		a.log.pc = pcs[0]
	}
	return a.logSlot.take(a.do(func(p *C.accel_accelerator) C.accel_status {
		return C.accel_log_message(p, C.accel_log_level(LevelToPython(level)), C.accel_log_flags(flags), cmsg)
	}))
}
