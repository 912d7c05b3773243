# Streams: datasets of unknown length, from Julia iterators and text files.
# token_stream is used again by gc.jl.
# Included by runtests.jl inside its top test set.

# A stream of n samples from a Julia iterator: sample k (counted from 1, as the package counts a
# stream's items) holds the tokens 100k + 1, ..., 100k + lens[k] (a ragged Int64 field) and the
# label 1000 epoch + k. `calls` records the epoch of every pass the library starts.
function token_stream(lens, calls = Int[])
    stream_dataset(RaggedField(Int64), Int64 => ()) do epoch
        push!(calls, epoch)
        ((collect(Int64, 100k .+ (1:lens[k])), 1000epoch + k) for k in 1:length(lens))
    end
end

# Stream loaders left to the finalizers (each with a batch taken), as weak references.
function forget_streams(acc)
    forgotten = WeakRef[]
    for round in 1:3
        ds = token_stream([1, 2, 3])
        loader = DataLoader(acc, ds; batch_size = 2)
        next_batch(loader)
        push!(forgotten, WeakRef(ds), WeakRef(ds.source), WeakRef(loader), WeakRef(loader.dataset.source))
    end
    forgotten
end

@testset "streams: ragged fields padded, epochs restart the stream" begin
    Accelerator() do acc
        calls = Int[]
        ds = token_stream([2, 0, 3, 1, 2], calls)
        @test isstream(ds) && field_count(ds) == 2
        e = error_of(() -> length(ds))
        @test e.status == Accel.ERR_UNSUPPORTED && occursin("stream", e.message)
        loader = DataLoader(acc, ds; batch_size = 2)
        @test isstream(loader) && field_count(loader) == 3     # tokens, label, attention mask
        @test error_of(() -> length(loader)).status == Accel.ERR_UNSUPPORTED
        @test calls == []                                       # nothing read before the first batch
        # Right padding with 0, the mask (padded, batch); the last global batch as it is (one process).
        got = Tuple[]
        remainders = Int[]
        for batch in loader
            push!(got, Array.(batch))
            push!(remainders, remainder(loader))
            @test end_of_epoch(loader) == (length(got) == 3)
        end
        @test got[1] == ([101 0; 102 0], [1, 2], [1 0; 1 0])
        @test got[2] == ([301 401; 302 0; 303 0], [3, 4], [1 1; 1 0; 1 0])
        @test got[3] == (reshape([501, 502], 2, 1), [5], reshape([1, 1], 2, 1))
        @test remainders == [-1, -1, 1]                          # known at the last batch
        @test calls == [0] && epoch(loader) == 1
        # Epoch 1 starts the stream again, with its own epoch; `collect` needs no length.
        batches = collect(loader)
        @test length(batches) == 3 && calls == [0, 1]
        owned = next_batch(loader)
        @test Array(owned[2]) == [2001, 2002]
        foreach(close, owned)
        @test position(loader) == (2, 2) && calls == [0, 1, 2]
        # set_epoch! in the middle of a pass starts another from the beginning.
        set_epoch!(loader, 7)
        @test Array(first(loader)[2]) == [7001, 7002] && calls == [0, 1, 2, 7]
        # A resume reads the stream from its start and drops what was consumed.
        set_position!(loader, 0, 2)
        @test [Array(y) for (t, y, m) in loader] == [[3, 4], [5]]
        skip_first_batches!(loader, 2)
        @test [Array(y) for (t, y, m) in loader] == [[1005]]

        # The padding options, set_field! included, as for any ragged field.
        set!(loader, :padding_side, :left)
        set!(loader, :mask, :lengths)
        set_field!(loader, 1, :pad_value, -1)
        got = [Array.(b) for b in loader]
        @test got[1] == ([101 -1; 102 -1], [2001, 2002], [2, 0])
        @test got[2] == ([301 -1; 302 -1; 303 401], [2003, 2004], [3, 1])
        e = error_of(() -> set_field!(loader, 2, :pad_value, 1))
        @test e.status == Accel.ERR_INVALID_ARGUMENT && occursin("field 2 is not ragged", e.message)
        close(loader)

        # Two dataloaders over one stream read passes of their own, even interleaved.
        a = DataLoader(acc, ds; batch_size = 2)
        b = DataLoader(acc, ds; batch_size = 2)
        set_epoch!(b, 1)
        labels(l) = (batch = next_batch(l); y = Array(batch[2]); foreach(close, batch); y)
        @test [labels(a), labels(b), labels(a), labels(b), labels(a), labels(b)] ==
              [[1, 2], [1001, 1002], [3, 4], [1003, 1004], [5], [1005]]
        foreach(close, (a, b))

        # Values converted to the field's type; a NamedTuple's values in field order; a string
        # for a RaggedField(UInt8); one field may be given alone; a ragged field with fixed dims.
        mixed = stream_dataset(RaggedField(UInt8), Float32 => (2,), RaggedField(Int32, 2)) do epoch
            ((text = w, x = [k, 0.5k], y = fill(k, 2, k)) for (k, w) in enumerate(["ab", "", "xyz"]))
        end
        DataLoader(acc, mixed; batch_size = 3, mask = :lengths) do l
            text, x, y, n_text, n_y = Array.(first(l))
            @test text == UInt8['a' 0 'x'; 'b' 0 'y'; 0 0 'z'] && n_text == [2, 0, 3]
            @test x == Float32[1 2 3; 0.5 1 1.5] && eltype(x) == Float32
            @test size(y) == (2, 3, 3) && y[:, :, 3] == fill(3, 2, 3) && y[:, 2, 1] == [0, 0]
            @test eltype(y) == Int32 && n_y == [1, 2, 3]
        end
        alone = stream_dataset(_ -> 1:3, Float64 => ())
        @test [Array(y) for (y,) in DataLoader(acc, alone; batch_size = 2)] == [[1.0, 2.0], [3.0]]

        # Stream loaders and their passes are collected like any handle.
        forgotten = forget_streams(acc)
        GC.gc(); GC.gc()
        @test all(r -> r.value === nothing, forgotten)
        foreach(close, (ds, mixed, alone))
    end
end

@testset "streams: a failure mid-epoch loses nothing" begin
    Accelerator() do acc
        # The iterator throws at its seventh item, once.
        calls = Int[]
        failed = Ref(false)
        ds = stream_dataset(Int64 => ()) do epoch
            push!(calls, epoch)
            (k == 7 && !failed[] ? (failed[] = true; throw(DomainError(k, "item seven is bad"))) : k
             for k in 1:10)
        end
        loader = DataLoader(acc, ds; batch_size = 4)
        got = Vector{Int64}[]
        e = error_of(() -> for (y,) in loader
            push!(got, Array(y))
        end)
        @test e.status == Accel.ERR_CALLBACK
        @test e.cause !== nothing && e.cause[1] isa DomainError && e.cause[1].val == 7
        @test occursin("item seven is bad", sprint(showerror, e))
        @test occursin("returned -1 for sample 7 of epoch 0", e.message)   # as Julia counts
        # The batch before it came through (the library reads one global batch ahead), and the
        # cursor stays after it.
        @test got == [[1, 2, 3, 4]]
        @test position(loader) == (0, 4)
        # The next call reads the stream again up to there and gives the batch that failed.
        for (y,) in loader
            push!(got, Array(y))
        end
        @test got == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
        @test calls == [0, 0] && epoch(loader) == 1

        # A factory that throws fails the same way, and so does an iterator that keeps failing.
        broken = stream_dataset(epoch -> error("no stream for epoch $epoch"), Int64 => ())
        e = error_of(() -> collect(DataLoader(acc, broken)))
        @test e.status == Accel.ERR_CALLBACK && occursin("no stream for epoch 0", sprint(showerror, e))
        @test occursin("sample 1 of epoch 0", e.message)
        foreach(close, (loader, ds, broken))
    end
end

@testset "streams: the lines of a text file" begin
    Accelerator() do acc
        path = joinpath(mktempdir(), "lines.txt")
        write(path, "first line\r\n\nthird\nno newline at the end")
        ds = text_lines_dataset(path)
        @test isstream(ds) && field_count(ds) == 1
        @test error_of(() -> length(ds)).status == Accel.ERR_UNSUPPORTED
        strings(bytes, lengths) = [String(bytes[1:n, j]) for (j, n) in enumerate(lengths)]
        loader = DataLoader(acc, ds; batch_size = 8, mask = :lengths)
        batches = [Array.(b) for b in loader]
        @test length(batches) == 1
        bytes, lengths = batches[1]
        @test eltype(bytes) == UInt8 && size(bytes) == (21, 4) && lengths == [10, 0, 5, 21]
        @test strings(bytes, lengths) == ["first line", "", "third", "no newline at the end"]
        close(loader)
        # Batches of 3 with the attention mask, padded with spaces; read again each epoch.
        loader = DataLoader(acc, ds; batch_size = 3, pad_value = UInt8(' '))
        for epoch in 0:1
            got = [Array.(b) for b in loader]
            @test length(got) == 2
            @test String(vec(got[1][1][:, 1])) == "first line" && got[1][2][:, 2] == zeros(Int, 10)
            @test got[1][1][:, 2] == fill(UInt8(' '), 10) && sum(got[1][2]; dims = 1) == [10 0 5]
            @test String(vec(got[2][1])) == "no newline at the end" && all(==(1), got[2][2])
        end
        # A line longer than max_length is named as an editor counts: sample 1 is line 1.
        set!(loader, :max_length, 8)
        e = error_of(() -> collect(loader))
        @test e.status == Accel.ERR_SHAPE && occursin("sample 1, field 1 has length 10", e.message)
        set_field!(loader, 1, :truncation, true)
        @test String(vec(Array(first(loader)[1])[:, 1])) == "first li"
        close(loader)
        # The library reads the file: workers are fine on every Julia.
        DataLoader(acc, ds; batch_size = 2, num_workers = 1, mask = :lengths) do threaded
            @test [Array(n) for (b, n) in threaded] == [[10, 0], [5, 21]]
        end
        e = error_of(() -> text_lines_dataset(path * ".missing"))
        @test e.status == Accel.ERR_IO && occursin("lines.txt.missing", e.message)
        close(ds)
    end
end

@testset "streams: wrong values and options" begin
    Accelerator() do acc
        # A value of the wrong size: the pass fails at that sample, the cause names it from 1.
        wrong = stream_dataset(Float32 => (2,)) do epoch
            (k == 2 ? Float32[1, 2, 3] : Float32[k, k] for k in 1:4)
        end
        loader = DataLoader(acc, wrong; batch_size = 1)
        @test Array(first(loader)[1]) == reshape(Float32[1, 1], 2, 1)
        e = error_of(() -> next_batch(loader))
        @test e.status == Accel.ERR_CALLBACK && occursin("returned -1 for sample 2 of epoch 0", e.message)
        @test e.cause[1] isa AccelError && e.cause[1].status == Accel.ERR_SHAPE
        @test occursin("sample 2, field 1: Julia size (3,)", e.cause[1].message)
        @test occursin("Float32 arrays of size (2,)", e.cause[1].message)
        close(loader)
        # A ragged field's fixed dims, a tuple of the wrong length, a value out of the type's range.
        cases = [(RaggedField(Float32, 2), _ -> (ones(3, 2),), Accel.ERR_SHAPE, "Julia size (3, 2)"),
                 (RaggedField(Int64), _ -> (1,), Accel.ERR_SHAPE, "Int64 arrays of size (n,)"),
                 (Int8 => (), _ -> (300,), Accel.ERR_DTYPE, "does not convert to the field's Int8")]
        for (field, items, status, text) in cases
            ds = stream_dataset(items, field)
            e = error_of(() -> collect(DataLoader(acc, ds)))
            @test e.status == Accel.ERR_CALLBACK && e.cause[1] isa AccelError
            @test e.cause[1].status == status && occursin("sample 1, field 1: ", e.cause[1].message)
            @test occursin(text, e.cause[1].message)
            close(ds)
        end
        pairs = stream_dataset(_ -> [1, 2], Int64 => (), Int64 => ())
        e = error_of(() -> collect(DataLoader(acc, pairs)))
        @test e.cause[1] isa ArgumentError && occursin("tuple of 2 values", e.cause[1].msg)

        # Declarations refused before the library is called.
        @test_throws ArgumentError stream_dataset(Int64 => ())
        @test_throws ArgumentError stream_dataset(_ -> 1:2)
        @test error_of(() -> stream_dataset(_ -> 1:2, ComplexF64 => ())).status == Accel.ERR_DTYPE

        # dispatch_batches: any value on a stream (one process dispatches nothing), refused on a
        # dataset of known length; group_by_length has no whole epoch to sort.
        for value in (true, false, :auto)
            DataLoader(acc, pairs; dispatch_batches = value) do l
                @test isstream(l)
            end
        end
        e = error_of(() -> DataLoader(acc, Dataset(rand(Float32, 2, 4)); dispatch_batches = true))
        @test e.status == Accel.ERR_UNSUPPORTED && occursin("dispatch_batches", e.message)
        @test !isstream(Dataset(rand(Float32, 2, 4)))
        @test error_of(() -> DataLoader(acc, pairs; dispatch_batches = :sometimes)).status == Accel.ERR_INVALID_ARGUMENT
        @test error_of(() -> DataLoader(acc, wrong; group_by_length = true)).status == Accel.ERR_UNSUPPORTED
        # Workers: the rule of function datasets holds for streams from Julia.
        if VERSION < v"1.9"
            e = error_of(() -> DataLoader(acc, pairs; num_workers = 1))
            @test e.status == Accel.ERR_UNSUPPORTED && occursin("stream", e.message) &&
                  occursin("num_workers = 0", e.message)
        else
            counting = stream_dataset(_ -> 1:10, Int64 => ())
            DataLoader(acc, counting; batch_size = 3, num_workers = 2) do threaded
                @test [Array(y) for (y,) in threaded] == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10]]
            end
            close(counting)
        end
        foreach(close, (wrong, pairs))
    end
end
