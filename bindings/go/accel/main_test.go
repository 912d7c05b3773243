package accel_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// The Fashion-MNIST files of Debian's dataset-fashion-mnist.
const fashionMNIST = "/usr/share/datasets/fashion-mnist"

// TestMain lets this test binary be the program `accel launch` runs on every rank: with
// ACCEL_GO_ROLE set it plays that role (multiprocess_test.go) instead of running the tests.
func TestMain(m *testing.M) {
	if role := os.Getenv("ACCEL_GO_ROLE"); role != "" {
		runtime.LockOSThread() // a training program's one OS thread (see accel.New)
		if err := runRole(role); err != nil {
			fmt.Fprintf(os.Stderr, "rank failed: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// No user configuration may leak into the tests.
	if os.Getenv("HF_HOME") == "" {
		os.Setenv("HF_HOME", filepath.Join(os.TempDir(), "libaccel-go-no-hf-home"))
	}
	os.Exit(m.Run())
}

// repoRoot is the repository's root (this package is bindings/go/accel).
func repoRoot(t testing.TB) string {
	dir, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// accelCLI is the `accel` command of the build under test.
func accelCLI(t testing.TB) string {
	if cli := os.Getenv("ACCEL_CLI"); cli != "" {
		return cli
	}
	return filepath.Join(repoRoot(t), "build/bin/accel")
}

// goTool is the go command that runs these tests.
func goTool() string {
	if path, err := exec.LookPath("go"); err == nil {
		return path
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// buildExample builds examples/<name> into a temporary directory once per test binary.
var builtExamples = map[string]string{}

func buildExample(t testing.TB, name string) string {
	// The example is built without -race, so under `go test -race` (binding.go.test_race) a test
	// that runs it would repeat the plain run (binding.go.test) exactly: only this binary is
	// instrumented. The race run keeps the tests whose ranks are this binary.
	if raceDetector {
		t.Skip("runs an example program, which is not built with -race: binding.go.test runs it")
	}
	if path, ok := builtExamples[name]; ok {
		return path
	}
	dir, err := os.MkdirTemp("", "libaccel-go-example-")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command(goTool(), "build", "-o", out, "./examples/"+name)
	cmd.Dir = filepath.Join(repoRoot(t), "bindings/go")
	if text, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/%s: %v\n%s", name, err, text)
	}
	builtExamples[name] = out
	return out
}
