package accel_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/libaccel/libaccel/bindings/go/accel"
)

// statusOf is err's library status; -1 when err is not an *accel.Error (nil included).
func statusOf(err error) accel.Status {
	var e *accel.Error
	if errors.As(err, &e) {
		return e.Status
	}
	return -1
}

func TestTokenizerOnAVocabularyWrittenHere(t *testing.T) {
	vocab := filepath.Join(t.TempDir(), "vocab.txt")
	ok(t, os.WriteFile(vocab, []byte("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\n##s\n"), 0o644))
	tok, err := accel.LoadTokenizer(vocab)
	ok(t, err)
	defer tok.Close()
	for _, c := range []struct {
		text      string
		maxLength int
		want      []int64
	}{{"Hello worlds", 0, []int64{2, 4, 5, 6, 3}}, {"Hello worlds", 3, []int64{2, 4, 3}}} {
		got, err := tok.Encode(c.text, c.maxLength)
		ok(t, err)
		if !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q, %d) = %v, want %v", c.text, c.maxLength, got, c.want)
		}
	}
	long, err := tok.Encode(strings.Repeat("hello ", 100), 0) // past the first buffer
	ok(t, err)
	if len(long) != 102 {
		t.Errorf("%d ids, want 102", len(long))
	}
	ids, mask, err := tok.EncodeBatch([]string{"hello", "worlds hello"}, 0)
	ok(t, err)
	defer ids.Close()
	defer mask.Close()
	shape, err := ids.Shape()
	ok(t, err)
	gotIDs, err := accel.ToSlice[int64](ids)
	ok(t, err)
	gotMask, err := accel.ToSlice[int64](mask)
	ok(t, err)
	if !slices.Equal(shape, []int64{2, 5}) ||
		!slices.Equal(gotIDs, []int64{2, 4, 3, 0, 0, 2, 5, 6, 4, 3}) ||
		!slices.Equal(gotMask, []int64{1, 1, 1, 0, 0, 1, 1, 1, 1, 1}) {
		t.Errorf("EncodeBatch: shape %v ids %v mask %v", shape, gotIDs, gotMask)
	}
	if id, err := tok.TokenID("[SEP]"); err != nil || id != 3 {
		t.Errorf("TokenID([SEP]) = %d, %v", id, err)
	}
	if n, err := tok.VocabSize(); err != nil || n != 7 {
		t.Errorf("VocabSize() = %d, %v", n, err)
	}
	if _, err := tok.TokenID("nope"); statusOf(err) != accel.ErrInvalidArgument {
		t.Errorf("TokenID(nope): %v", err)
	}
	if _, err := tok.Encode("hello", 1); statusOf(err) != accel.ErrInvalidArgument {
		t.Errorf("Encode with max_length 1: %v", err)
	}
	if _, err := accel.LoadTokenizer(filepath.Join(t.TempDir(), "missing.json")); statusOf(err) != accel.ErrIO {
		t.Errorf("a missing file: %v", err)
	}
	ok(t, tok.Close())
	if _, err := tok.Encode("hello", 0); statusOf(err) != accel.ErrState {
		t.Errorf("Encode after Close: %v", err)
	}
}

func TestTokenizerMiniLM(t *testing.T) {
	model := filepath.Join(repoRoot(t), "build/minilm/model")
	if _, err := os.Stat(filepath.Join(model, "tokenizer.json")); err != nil {
		t.Skipf("no %s (tools/fetch_minilm.sh)", model)
	}
	tok, err := accel.LoadTokenizer(model)
	ok(t, err)
	defer tok.Close()
	// tokenizers 0.19.1's ids (text.tokenizer_differential checks thousands more).
	got, err := tok.Encode("Crème brûlée", 256)
	ok(t, err)
	if want := []int64{101, 13675, 21382, 7987, 9307, 2063, 102}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if n, err := tok.VocabSize(); err != nil || n != 30522 {
		t.Errorf("VocabSize() = %d, %v", n, err)
	}
	var wg sync.WaitGroup // one tokenizer, several goroutines at once
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 50; k++ {
				ids, err := tok.Encode("Hello, World!", 256)
				if err != nil || !slices.Equal(ids, []int64{101, 7592, 1010, 2088, 999, 102}) {
					t.Errorf("Encode = %v, %v", ids, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
