# The BERT WordPiece tokenizer: a vocabulary written here, and sentence-transformers'
# all-MiniLM-L6-v2 tokenizer (build/minilm/model, from tools/fetch_minilm.sh; skipped without).
# Included by runtests.jl inside its top test set.

@testset "Tokenizer" begin
    dir = mktempdir()
    vocab = joinpath(dir, "vocab.txt")
    write(vocab, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\n##s\n")
    Tokenizer(vocab) do tok
        @test encode(tok, "Hello worlds") == [2, 4, 5, 6, 3]
        @test encode(tok, "Hello worlds"; max_length = 3) == [2, 4, 3]
        @test length(encode(tok, repeat("hello ", 100))) == 102   # past the first buffer
        ids, mask = encode_batch(tok, ["hello", "worlds hello"])
        @test shape(ids) == [2, 5]
        @test Array(ids) == [2 2; 4 5; 3 6; 0 4; 0 3]              # one column a text
        @test Array(mask) == [1 1; 1 1; 1 1; 0 1; 0 1]
        close(ids); close(mask)
        @test token_id(tok, "[SEP]") == 3
        @test vocab_size(tok) == 7
        @test error_of(() -> token_id(tok, "nope")).status == Accel.ERR_INVALID_ARGUMENT
        @test error_of(() -> encode(tok, "hello"; max_length = 1)).status == Accel.ERR_INVALID_ARGUMENT
    end
    @test error_of(() -> Tokenizer(joinpath(dir, "missing.json"))).status == Accel.ERR_IO
    rm(dir; recursive = true)

    model = joinpath(@__DIR__, "..", "..", "..", "..", "build", "minilm", "model")
    if isfile(joinpath(model, "tokenizer.json"))
        Tokenizer(model) do tok
            # tokenizers 0.19.1's ids (text.tokenizer_differential checks thousands more).
            @test encode(tok, "Crème brûlée"; max_length = 256) == [101, 13675, 21382, 7987, 9307, 2063, 102]
            @test length(encode(tok, repeat("word ", 300); max_length = 256)) == 256
            @test vocab_size(tok) == 30522
        end
    else
        @info "skipped the MiniLM tokenizer: no $model (tools/fetch_minilm.sh)"
    end
end
