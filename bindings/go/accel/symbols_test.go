package accel_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// leftOut is the functions bindings/left_out.txt says a binding does not use, with its reason.
func leftOut(t *testing.T, root, language string) map[string]bool {
	text, err := os.ReadFile(filepath.Join(root, "bindings/left_out.txt"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(text), "\n") {
		if fields := strings.Fields(line); len(fields) >= 2 && fields[0] == language {
			out[fields[1]] = true
		}
	}
	return out
}

// Nothing of the header is left out: every symbol of tests/abi/symbols.txt is called by the
// package (C.accel_x in its Go files, or accel_x( in its C shim), but those
// bindings/left_out.txt lists for go with the reason.
func TestEverySymbolIsCalled(t *testing.T) {
	root := repoRoot(t)
	list, err := os.ReadFile(filepath.Join(root, "tests/abi/symbols.txt"))
	if err != nil {
		t.Fatal(err)
	}
	skipped := leftOut(t, root, "go")
	// Go calls C functions as C.name(...); the shim calls them as name(...).
	var source strings.Builder
	files, _ := filepath.Glob("*.go")
	cfiles, _ := filepath.Glob("*.c")
	for _, f := range append(files, cfiles...) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".c") {
			text = regexp.MustCompile(`\baccel_`).ReplaceAll(text, []byte("C.accel_"))
		}
		source.Write(text)
	}
	symbols := 0
	for _, line := range strings.Split(string(list), "\n") {
		name := strings.TrimSpace(line)
		if name == "" || strings.HasPrefix(name, "#") {
			continue
		}
		symbols++
		if skipped[name] {
			continue
		}
		called := regexp.MustCompile(`C\.` + name + `\(`)
		if !called.MatchString(source.String()) {
			t.Errorf("%s is never called by package accel", name)
		}
	}
	if symbols < 100 {
		t.Fatalf("only %d symbols read from symbols.txt", symbols)
	}
}
