package accel

// #include "shim.h"
import "C"

import "unsafe"

// Tokenizer is Hugging Face's BERT WordPiece tokenizer (accel.h, "Tokenizers"): the ids its
// tokenizers library (0.19.1) gives, [CLS] and [SEP] included, read from a tokenizer.json, a
// vocab.txt or a model directory such as sentence-transformers' all-MiniLM-L6-v2 folder. It is
// immutable: any goroutines may use one at once.
type Tokenizer struct {
	h *handle[*C.accel_tokenizer]
}

func (t *Tokenizer) ref() *handle[*C.accel_tokenizer] {
	if t == nil {
		return nil
	}
	return t.h.orUnopened()
}

// LoadTokenizer loads path: tokenizer.json, vocab.txt or a directory holding either. A missing
// or corrupt file is ErrIO; a tokenizer of another kind (BPE, ...) ErrInvalidArgument naming what
// is not supported.
func LoadTokenizer(path string) (*Tokenizer, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	cpath, free, err := cString(path, "the path")
	if err != nil {
		return nil, err
	}
	defer free()
	var p *C.accel_tokenizer
	if err := call(func() C.accel_status { return C.accel_tokenizer_load(cpath, &p) }); err != nil {
		return nil, err
	}
	t := &Tokenizer{}
	t.h = newHandle(t, p)
	return t, nil
}

// Encode is the ids of text; maxLength counts [CLS] and [SEP] (0: no truncation).
func (t *Tokenizer) Encode(text string, maxLength int) ([]int64, error) {
	ctext, free, err := cString(text, "the text")
	if err != nil {
		return nil, err
	}
	defer free()
	ids := make([]int64, 64)
	err = use(t.ref(), "Tokenizer", func(p *C.accel_tokenizer) error {
		for {
			var needed C.size_t
			err := call(func() C.accel_status {
				return C.accel_tokenizer_encode(p, ctext, C.size_t(maxLength),
					(*C.int64_t)(unsafe.Pointer(&ids[0])), C.size_t(len(ids)), &needed)
			})
			if e, small := err.(*Error); small && e.Status == ErrBufferTooSmall && int(needed) > len(ids) {
				ids = make([]int64, int(needed))
				continue
			}
			if err == nil {
				ids = ids[:int(needed)]
			}
			return err
		}
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// EncodeBatch is (inputIDs, attentionMask): int64 tensors [len(texts), longest], each row padded
// on the right with [PAD], the mask 1 for a token and 0 for padding (as sentence-transformers pads
// each batch). At least one text. The caller closes both tensors.
func (t *Tokenizer) EncodeBatch(texts []string, maxLength int) (*Tensor, *Tensor, error) {
	if len(texts) == 0 {
		return nil, nil, newError(ErrInvalidArgument, "EncodeBatch: no texts (a batch needs at least one)")
	}
	ctexts := make([]*C.char, len(texts)) // Go memory holding C pointers only: cgo allows it
	defer func() {
		for _, c := range ctexts {
			C.free(unsafe.Pointer(c))
		}
	}()
	for i, text := range texts {
		c, _, err := cString(text, "a text")
		if err != nil {
			return nil, nil, err
		}
		ctexts[i] = c
	}
	var ids, mask *C.accel_tensor
	err := do(t.ref(), "Tokenizer", func(p *C.accel_tokenizer) C.accel_status {
		return C.accel_tokenizer_encode_batch(p, &ctexts[0], C.size_t(len(ctexts)),
			C.size_t(maxLength), &ids, &mask)
	})
	if err != nil {
		return nil, nil, err
	}
	return newTensor(ids), newTensor(mask), nil
}

// TokenID is the id of token ("[CLS]"); a token it does not have is ErrInvalidArgument.
func (t *Tokenizer) TokenID(token string) (int64, error) {
	ctoken, free, err := cString(token, "the token")
	if err != nil {
		return 0, err
	}
	defer free()
	var id C.int64_t
	err = do(t.ref(), "Tokenizer", func(p *C.accel_tokenizer) C.accel_status {
		return C.accel_tokenizer_token_id(p, ctoken, &id)
	})
	return int64(id), err
}

// VocabSize is the number of distinct tokens, vocabulary and added tokens together (30522 for
// MiniLM).
func (t *Tokenizer) VocabSize() (int, error) {
	n, err := query(t.ref(), "Tokenizer", func(p *C.accel_tokenizer, out *C.size_t) C.accel_status {
		return C.accel_tokenizer_vocab_size(p, out)
	})
	return int(n), err
}

// Close frees the tokenizer. Idempotent; safe from any goroutine (a call running finishes first).
func (t *Tokenizer) Close() error { return t.ref().close() }
