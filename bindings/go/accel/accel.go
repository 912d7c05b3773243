// Package accel is libaccel from Go: Hugging Face Accelerate's data-parallel training on
// LibTorch, one program for one process or many (under `accel launch -n N`, torchrun or a
// cluster's launcher), through libaccel's C interface (accel.h, ABI 0.2).
//
// A training step:
//
//	runtime.LockOSThread()                // the loop on one OS thread: see New
//	acc, err := accel.New(nil)            // the process's place among the ranks
//	...
//	err = acc.Prepare(model, opt, sched, loader)
//	for batch, err := range loader.All() { // this rank's shard of every global batch, closed after
//		if err != nil { ... }
//		acc.Accumulate()
//		loss, _ := model.Call("training_step", batch...)
//		acc.Backward(loss)                 // gradients averaged across the ranks
//		opt.Step(); sched.Step(); opt.ZeroGrad()
//		loss.Close()
//	}
//
// Errors: every method of a handle (Accelerator, Tensor, Model, ...) returns an error as its
// last result, queries included ((value, error): ProcessIndex as much as ElementCount), and a
// nil handle (ErrInvalidArgument) or a closed one (ErrState) is such an error, never a panic
// (but Close: closing nil or a closed handle closes nothing and is no error). Only plain
// values' methods (DType.Size, Status.String, ...) return no error. Errors are
// *Error values with a Status (errors.Is(err, accel.ErrTimeout)) and the library's message for
// that very call, whatever goroutine or thread made it.
//
// Closing: every handle is an io.Closer (Close is idempotent, returns nil, and may run from any
// goroutine, even while a call on the handle runs: the last of them frees it). A cleanup frees
// what is not closed once it is unreachable, but the garbage collector does not see the
// library's memory, so close tensors in loops. Fewer closes to write: a Scope closes at once
// every tensor added to it (s.Tensor(acc.Gather(x))), TakeFloat64 and TakeSlice read a result
// and close it, and DataLoader.All closes each batch after the loop body.
//
// Logging: the accelerator's messages (Accelerate's get_logger: acc.Info(msg) from the main
// process, acc.Info(msg, accel.AllProcesses()) from every one, accel.InOrder() in rank order) go
// to log/slog, slog.Default() unless SetLogger says otherwise, with the attribute "rank"; the
// configuration's log_level (ACCELERATE_LOG_LEVEL) or SetLogLevel drops those below it.
//
// Tensors cross by copy, row-major. Every method may be called from any goroutine; calls on one
// training family (an accelerator and what it prepared) run one after the other.
//
// Building: cgo finds the library with `pkg-config accel` (set PKG_CONFIG_PATH for an install
// outside the system prefix), or, with -tags accel_nopkgconfig, through CGO_CFLAGS and
// CGO_LDFLAGS. At run time libaccel.so.0.2 must be on the loader's path (LD_LIBRARY_PATH, or an
// rpath with -ldflags=-r=<libdir>).
package accel

// #include "shim.h"
import "C"

// The library versions this package works with: [MinVersion, MaxVersion), as
// major*10000 + minor*100 + patch (accel.h, "Versions").
const (
	MinVersion = 200
	MaxVersion = 300
)

// Version is the version of the libaccel loaded, "major.minor.patch".
func Version() string { return C.GoString(C.accel_version()) }

// checkVersion fails every constructor when the loaded library lies outside the supported range
// (a libaccel.so.0.2 of an older patch lacks nothing, a later minor is another ABI). Read once,
// when the package is initialised: tensor constructors check it on every call.
func checkVersion() error { return loadedVersionErr }

var loadedVersionErr = versionInRange(uint32(C.accel_version_number()))

func versionInRange(n uint32) error {
	if n < MinVersion || n >= MaxVersion {
		return newError(ErrUnsupported,
			"libaccel %d.%d.%d is loaded; package accel supports [%d.%d.0, %d.%d.0)",
			n/10000, n/100%100, n%100, MinVersion/10000, MinVersion/100%100,
			MaxVersion/10000, MaxVersion/100%100)
	}
	return nil
}

// HeaderVersion is the version of accel.h this package was compiled with.
const HeaderVersion = C.ACCEL_VERSION_NUMBER
