//! Hugging Face's BERT WordPiece tokenizer (accel.h, "Tokenizers").

use std::ffi::CString;
use std::path::Path;

use libaccel_sys as sys;

use crate::error::{check, Result};
use crate::ffi::{c_string, ensure_supported_library, make, owned_handle, path_string, query};
use crate::Tensor;

owned_handle!(
    /// A BERT WordPiece tokenizer giving the ids Hugging Face's `tokenizers` (0.19.1) gives,
    /// `[CLS]` and `[SEP]` included: from a `tokenizer.json`, a `vocab.txt` or a model directory
    /// such as sentence-transformers' all-MiniLM-L6-v2 folder. Immutable once loaded: share one
    /// across threads (`Send + Sync`).
    ///
    /// ```no_run
    /// use accel::Tokenizer;
    /// let tok = Tokenizer::load("build/minilm/model")?;
    /// let ids = tok.encode("Hello, World!", 256)?; // [101, 7592, 1010, 2088, 999, 102]
    /// let (input_ids, attention_mask) = tok.encode_batch(["a line", "another line"], 256)?;
    /// # Ok::<(), accel::Error>(())
    /// ```
    Tokenizer,
    sys::accel_tokenizer,
    sys::accel_tokenizer_free
);

impl Tokenizer {
    /// Loads `path`: tokenizer.json, vocab.txt or a directory holding either. A missing or
    /// corrupt file is [`Status::Io`](crate::Status::Io); a tokenizer of another kind (BPE, ...)
    /// [`Status::InvalidArgument`](crate::Status::InvalidArgument) naming what is not supported.
    pub fn load(path: impl AsRef<Path>) -> Result<Tokenizer> {
        ensure_supported_library()?;
        let path = path_string(path.as_ref())?;
        // SAFETY: NUL-terminated path, valid out pointer.
        let raw = make(|out| unsafe { sys::accel_tokenizer_load(path.as_ptr(), out) })?;
        // SAFETY: a new handle we own.
        Ok(unsafe { Tokenizer::from_raw(raw) }.expect("make returns non-null"))
    }

    /// The ids of `text`; `max_length` counts `[CLS]` and `[SEP]` (0: no truncation).
    pub fn encode(&self, text: &str, max_length: usize) -> Result<Vec<i64>> {
        let text = c_string(text, "text")?;
        let mut ids = vec![0i64; 64];
        loop {
            let mut needed = 0usize;
            // SAFETY: live handle, NUL-terminated text, a buffer of ids.len() elements.
            let status = unsafe {
                sys::accel_tokenizer_encode(
                    self.as_raw(),
                    text.as_ptr(),
                    max_length,
                    ids.as_mut_ptr(),
                    ids.len(),
                    &mut needed,
                )
            };
            if status == sys::ACCEL_ERR_BUFFER_TOO_SMALL && needed > ids.len() {
                ids.resize(needed, 0);
                continue;
            }
            check(status)?;
            ids.truncate(needed);
            return Ok(ids);
        }
    }

    /// `(input_ids, attention_mask)`: int64 tensors `[texts, longest]`, each row padded on the
    /// right with `[PAD]`, the mask 1 for a token and 0 for padding (as sentence-transformers
    /// pads each batch). At least one text.
    pub fn encode_batch<I, S>(&self, texts: I, max_length: usize) -> Result<(Tensor, Tensor)>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let texts = texts
            .into_iter()
            .map(|t| c_string(t.as_ref(), "text"))
            .collect::<Result<Vec<CString>>>()?;
        let ptrs: Vec<_> = texts.iter().map(|t| t.as_ptr()).collect();
        let mut ids = std::ptr::null_mut();
        let mut mask = std::ptr::null_mut();
        // SAFETY: live handle, `ptrs.len()` NUL-terminated texts, valid out pointers.
        check(unsafe {
            sys::accel_tokenizer_encode_batch(
                self.as_raw(),
                ptrs.as_ptr(),
                ptrs.len(),
                max_length,
                &mut ids,
                &mut mask,
            )
        })?;
        // SAFETY: two new tensor handles we own.
        let (ids, mask) = unsafe { (Tensor::from_raw(ids), Tensor::from_raw(mask)) };
        Ok((
            ids.expect("non-null on success"),
            mask.expect("non-null on success"),
        ))
    }

    /// The id of `token` (`"[CLS]"`); a token it does not have is
    /// [`Status::InvalidArgument`](crate::Status::InvalidArgument).
    pub fn token_id(&self, token: &str) -> Result<i64> {
        let token = c_string(token, "token")?;
        // SAFETY: live handle, NUL-terminated token, valid out pointer.
        query(|out| unsafe { sys::accel_tokenizer_token_id(self.as_raw(), token.as_ptr(), out) })
    }

    /// The number of distinct tokens, vocabulary and added tokens together (30522 for MiniLM).
    pub fn vocab_size(&self) -> Result<usize> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_tokenizer_vocab_size(self.as_raw(), out) })
    }
}
