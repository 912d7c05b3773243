# Hugging Face's BERT WordPiece tokenizer (accel.h, "Tokenizers").

"""
    Tokenizer(path)

Hugging Face's BERT WordPiece tokenizer, giving the ids its `tokenizers` library (0.19.1) gives,
`[CLS]` and `[SEP]` included: from a `tokenizer.json`, a `vocab.txt` or a model directory such as
sentence-transformers' all-MiniLM-L6-v2 folder. A missing or corrupt file throws `ERR_IO`, a
tokenizer of another kind (BPE, ...) `ERR_INVALID_ARGUMENT`. Immutable: tasks on several threads
may use one at once.

`encode(tok, text; max_length = 0)` gives the ids (`max_length` counts `[CLS]` and `[SEP]`; 0:
no truncation); `encode_batch(tok, texts; max_length = 0)` gives `(input_ids, attention_mask)`,
int64 tensors of the library's shape [texts, longest] (so `Array(input_ids)` is longest × texts in
Julia, one column a text), padded with `[PAD]`; `token_id(tok, "[CLS]")`, `vocab_size(tok)`.
"""
mutable struct Tokenizer <: Handle
    ptr::Ptr{Cvoid}
    Tokenizer(path::AbstractString) =
        own(new(@out(Ptr{Cvoid}, accel_tokenizer_load(c_text(path)))))
end
Tokenizer(f::Function, path::AbstractString) = with_handle(f, Tokenizer(path))

free_handle(::Tokenizer, p) = @acall accel_tokenizer_free(p)

"""
    encode(tok::Tokenizer, text; max_length = 0) -> Vector{Int64}

The ids of `text`, `[CLS]` first and `[SEP]` last; `max_length` counts them (0: no truncation).
"""
function encode(tok::Tokenizer, text::AbstractString; max_length::Integer = 0)
    input = c_text(text)
    ids = Vector{Int64}(undef, 64)
    count = Ref{Csize_t}(0)
    status = @acall accel_tokenizer_encode(tok, input, max_length, ids, length(ids), count)
    if status == Int32(ERR_BUFFER_TOO_SMALL)
        resize!(ids, count[])
        status = @acall accel_tokenizer_encode(tok, input, max_length, ids, length(ids), count)
    end
    status == 0 || throw_status(status)
    resize!(ids, count[])
end

"""
    encode_batch(tok::Tokenizer, texts; max_length = 0) -> (input_ids, attention_mask)

The texts encoded as `encode` does and padded on the right with `[PAD]` to the longest, as
sentence-transformers pads a batch: two int64 `Tensor`s of the library's shape [texts, longest]
(`Array` gives longest × texts), the mask 1 for a token and 0 for padding. Close them.
"""
function encode_batch(tok::Tokenizer, texts; max_length::Integer = 0)
    strings = String[c_text(t) for t in texts]
    isempty(strings) && throw(ArgumentError("encode_batch: no texts (a batch needs at least one)"))
    ids = Ref{Ptr{Cvoid}}(C_NULL)
    mask = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve strings begin
        pointers = Ptr{UInt8}[pointer(s) for s in strings]
        @check accel_tokenizer_encode_batch(tok, pointers, length(pointers), max_length, ids, mask)
    end
    Tensor(ids[], Val(:own)), Tensor(mask[], Val(:own))
end

"The id of `token` (\"[CLS]\"); a token the tokenizer lacks throws `ERR_INVALID_ARGUMENT`."
token_id(tok::Tokenizer, token::AbstractString) =
    @out(Int64, accel_tokenizer_token_id(tok, c_text(token)))

"The number of distinct tokens, vocabulary and added tokens together (30522 for MiniLM)."
vocab_size(tok::Tokenizer) = Int(@out(Csize_t, accel_tokenizer_vocab_size(tok)))
