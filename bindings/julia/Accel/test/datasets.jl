# Function datasets and ragged datasets: padded batches, masks, group_by_length.
# Included by runtests.jl inside its top test set.

@testset "function datasets" begin
    Accelerator() do acc
        seen = Int[]
        ds = Dataset(10, Float32 => (3,), Int64 => ()) do i, x, y
            push!(seen, i)
            x .= Float32[i, 2i, 3i]
            y[] = 100 + i
        end
        @test length(ds) == 10 && field_count(ds) == 2
        loader = DataLoader(acc, ds; batch_size = 4)
        @test length(loader) == 3 && field_count(loader) == 2
        got = [(Array(x), Array(y)) for (x, y) in loader]
        @test sort(seen) == 1:10
        @test got[1][1] == Float32[1 2 3 4; 2 4 6 8; 3 6 9 12] && got[1][2] == 101:104
        @test size(got[3][1]) == (3, 2)

        # An exception inside becomes an AccelError of the iteration, the original attached.
        failing = Dataset(8, Float32 => ()) do i, x
            i == 6 && throw(DomainError(i, "sample six is bad"))
            x[] = i
        end
        fl = DataLoader(acc, failing; batch_size = 2)
        got = Float32[]
        e = error_of(() -> for (x,) in fl
            append!(got, Array(x))
        end)
        @test e.status == Accel.ERR_CALLBACK
        @test e.cause !== nothing && e.cause[1] isa DomainError && e.cause[1].val == 6
        @test occursin("sample six is bad", sprint(showerror, e))
        @test occursin("returned 1 for sample 6", e.message)   # as Julia counts
        @test got == Float32[1, 2, 3, 4]
        # The next iteration starts that epoch again, and fails at the same place.
        e = error_of(() -> foreach(identity, fl))
        @test e.status == Accel.ERR_CALLBACK && e.cause[1] isa DomainError

        # A field type with no library dtype is refused.
        @test error_of(() -> Dataset((i, x) -> nothing, 4, ComplexF64 => ())).status == Accel.ERR_DTYPE

        # Workers: refused before Julia 1.9 (callbacks on foreign threads), allowed from 1.9.
        if VERSION < v"1.9"
            e = error_of(() -> DataLoader(acc, ds; num_workers = 2))
            @test e.status == Accel.ERR_UNSUPPORTED && occursin("num_workers = 0", e.message)
            e = error_of(() -> set!(loader, :num_workers, 1))
            @test e.status == Accel.ERR_UNSUPPORTED
            @test error_of(() -> set!(loader, "num_workers", " 3")).status == Accel.ERR_UNSUPPORTED
            set!(loader, :num_workers, 0)
        else
            threaded = DataLoader(acc, ds; batch_size = 4, num_workers = 2)
            @test sum(sum(Array(y)) for (x, y) in threaded) == sum(101:110)
            close(threaded)
        end
        # Arrays and IDX datasets take workers on every Julia.
        arrays = DataLoader(acc, Dataset(rand(Float32, 2, 16)); batch_size = 4, num_workers = 2)
        @test count(_ -> true, arrays) == 4
        close(arrays)
        foreach(close, (loader, fl, ds, failing))
    end
end

@testset "ragged datasets: padded batches and their masks" begin
    # Sample i: the tokens 100i + 1, ..., 100i + n(i) (a ragged Int64 field) and the label i.
    ns = [3, 1, 0, 5, 2]
    tokens_of(i) = collect(Int64, 100i .+ (1:ns[i]))
    corpus() = Dataset(length(ns), RaggedField(Int64), Int64 => (); lengths = i -> ns[i]) do i, tokens, label
        @assert size(tokens) == (ns[i],)
        tokens .= tokens_of(i)
        label[] = i
    end
    batches(loader) = [Array.(b) for b in loader]
    Accelerator() do acc
        ds = corpus()
        @test length(ds) == 5 && field_count(ds) == 2
        # Defaults: right padding with 0 and an attention mask, Julia size (padded, batch).
        loader = DataLoader(acc, ds; batch_size = 2)
        @test field_count(loader) == 3 && length(loader) == 3
        got = batches(loader)
        @test got[1] == ([101 201; 102 0; 103 0], [1, 2], [1 1; 1 0; 1 0])
        @test got[2] == ([0 401; 0 402; 0 403; 0 404; 0 405], [3, 4], [0 1; 0 1; 0 1; 0 1; 0 1])
        @test got[3] == (reshape([501, 502], 2, 1), [5], reshape([1, 1], 2, 1))
        @test eltype(got[1][3]) == Int64

        # Left padding with -1 to a multiple of 4, lengths instead of a mask.
        set!(loader, :pad_value, -1)
        set!(loader, :padding_side, :left)
        set!(loader, :pad_to_multiple_of, 4)
        set!(loader, :mask, :lengths)
        @test field_count(loader) == 3
        got = batches(loader)
        @test got[1] == ([-1 -1; 101 -1; 102 -1; 103 201], [1, 2], [3, 1])
        @test got[2][1] == [-1 -1; -1 -1; -1 -1; -1 401; -1 402; -1 403; -1 404; -1 405] && got[2][3] == [0, 5]
        @test got[3] == ([-1, -1, 501, 502][:, :], [5], [2])
        # No mask: the dataset's fields alone.
        set!(loader, :mask, :none)
        @test field_count(loader) == 2 && length(first(batches(loader))) == 2
        set!(loader, :mask, nothing)
        @test field_count(loader) == 2
        close(loader)

        # The same options as keywords of the constructor.
        DataLoader(acc, ds; batch_size = 3, padding_side = :left, mask = :lengths, pad_value = 9,
                   max_length = nothing) do kw
            got = batches(kw)
            @test got[1] == ([101 9 9; 102 9 9; 103 201 9], [1, 2, 3], [3, 1, 0])
            @test got[2] == ([401 9; 402 9; 403 9; 404 501; 405 502], [4, 5], [5, 2])
        end

        # max_length without truncation: the batch holding the long sample fails with ERR_SHAPE
        # naming it as Julia counts (sample 4, field 1); the batches before it came through.
        long = DataLoader(acc, ds; batch_size = 2, max_length = 3)
        seen = Vector{Int64}[]
        e = error_of(() -> for (t, label, mask) in long
            push!(seen, Array(label))
        end)
        @test e !== nothing && e.status == Accel.ERR_SHAPE
        @test occursin("sample 4, field 1 has length 5, above max_length 3", e.message)
        @test occursin("truncation", e.message)
        @test seen == [[1, 2]]
        # With truncation a sample's first max_length tokens are kept, and the mask says so.
        set!(long, :truncation, true)
        got = batches(long)
        @test got[2] == ([0 401; 0 402; 0 403], [3, 4], [0 1; 0 1; 0 1])
        close(long)

        # Padding options are for ragged fields.
        plain = DataLoader(acc, Dataset(rand(Float32, 2, 4)))
        e = error_of(() -> set!(plain, :pad_value, 1))
        @test e.status == Accel.ERR_INVALID_ARGUMENT && occursin("ragged", e.message)
        @test error_of(() -> set!(plain, :group_by_length, true)).status == Accel.ERR_INVALID_ARGUMENT
        @test error_of(() -> set_field!(plain, 1, :pad_value, 1)).status == Accel.ERR_INVALID_ARGUMENT
        close(plain)
        loader = DataLoader(acc, ds)
        e = error_of(() -> set!(loader, :padding_side, :middle))
        @test e.status == Accel.ERR_INVALID_ARGUMENT && occursin("right, left", e.message)
        @test error_of(() -> set!(loader, :max_length, 0)).status == Accel.ERR_INVALID_ARGUMENT
        close(loader)
        close(ds)
    end
end

@testset "ragged datasets: several ragged fields, set_field!, failures" begin
    Accelerator() do acc
        # Field 1: n rows of 2 features (Julia 2 x n); field 2: 4 - n Int32 tokens; field 3 fixed.
        ds = Dataset(3, RaggedField(Float32, 2), RaggedField(Int32), Int64 => ();
                     lengths = i -> (i, 4 - i)) do i, x, y, z
            @assert size(x) == (2, i) && size(y) == (4 - i,)
            x .= reshape(Float32.(10i .+ (1:2i)), 2, i)
            y .= -i
            z[] = i
        end
        loader = DataLoader(acc, ds; batch_size = 3)
        @test field_count(loader) == 5      # three fields, two masks
        set_field!(loader, 2, :mask, :lengths)
        set_field!(loader, 2, :pad_value, 7)
        set_field!(loader, 1, :padding_side, :left)
        x, y, z, mask1, lengths2 = Array.(first(loader))
        @test size(x) == (2, 3, 3)
        @test x[:, :, 1] == Float32[0 0 11; 0 0 12]
        @test x[:, :, 2] == Float32[0 21 23; 0 22 24]
        @test x[:, :, 3] == Float32[31 33 35; 32 34 36]
        @test y == Int32[-1 -2 -3; -1 -2 7; -1 7 7]
        @test z == [1, 2, 3]
        @test mask1 == [0 0 1; 0 1 1; 1 1 1]
        @test lengths2 == [3, 2, 1]
        set_field!(loader, 1, :mask, :none)
        @test field_count(loader) == 4
        # Fields count from 1; only ragged ones take padding options.
        e = error_of(() -> set_field!(loader, 3, :pad_value, 1))
        @test e.status == Accel.ERR_INVALID_ARGUMENT && occursin("field 3 is not ragged", e.message)
        e = error_of(() -> set_field!(loader, 0, :pad_value, 1))
        @test e.status == Accel.ERR_INVALID_ARGUMENT && occursin("1:3", e.message)
        @test error_of(() -> set_field!(loader, 1, :colour, 1)).status == Accel.ERR_INVALID_ARGUMENT
        close(loader)

        # The lengths function's failures are the iteration's, with the exception as the cause.
        bad = Dataset(4, RaggedField(Int64); lengths = i -> i == 3 ? error("no length for 3") : i) do i, t
            t .= i
        end
        e = error_of(() -> foreach(identity, DataLoader(acc, bad; batch_size = 2)))
        @test e.status == Accel.ERR_CALLBACK && e.cause[1] isa ErrorException
        @test occursin("no length for 3", sprint(showerror, e))
        @test occursin("length callback returned 1 for sample 3", e.message)   # counted from 1
        twice = Dataset((i, t) -> nothing, 2, RaggedField(Int64); lengths = i -> (1, 2))
        e = error_of(() -> foreach(identity, DataLoader(acc, twice)))
        @test e.status == Accel.ERR_CALLBACK && occursin("1 ragged field", sprint(showerror, e.cause...))
        negative = Dataset((i, t) -> nothing, 2, RaggedField(Int64); lengths = i -> -i)
        e = error_of(() -> foreach(identity, DataLoader(acc, negative)))
        @test e.status == Accel.ERR_SHAPE && occursin("sample 1, field 1", e.message)

        # Declarations refused before the library is called.
        @test_throws ArgumentError Dataset((i, t) -> nothing, 2, RaggedField(Int64))
        @test_throws ArgumentError Dataset((i, t) -> nothing, 2, Int64 => (); lengths = i -> 1)
        @test error_of(() -> Dataset((i, t) -> nothing, 2, RaggedField(ComplexF64); lengths = i -> 1)).status == Accel.ERR_DTYPE
        @test_throws ArgumentError RaggedField(Int64, -1)

        # Workers: the rule of function datasets holds for ragged ones.
        if VERSION < v"1.9"
            e = error_of(() -> DataLoader(acc, ds; num_workers = 1))
            @test e.status == Accel.ERR_UNSUPPORTED && occursin("num_workers = 0", e.message)
        else
            DataLoader(acc, ds; batch_size = 2, num_workers = 2) do threaded
                @test sum(sum(Array(b[3])) for b in threaded) == 6
            end
        end
        foreach(close, (ds, bad, twice, negative))
    end
end

@testset "ragged datasets: group_by_length" begin
    Accelerator() do acc
        n = 40
        len(i) = 1 + (i * 7) % 13
        ds = Dataset(n, RaggedField(Int64), Int64 => (); lengths = len) do i, t, label
            t .= i
            label[] = i
        end
        loader = DataLoader(acc, ds; batch_size = 4, shuffle = true, seed = 3, group_by_length = true)
        @test length(loader) == 10
        for epoch in 0:1
            set_epoch!(loader, epoch)
            labels = Int64[]
            padded = Int[]
            for (t, label, mask) in loader
                l = Array(label)
                append!(labels, l)
                push!(padded, size(t)[1])
                @test size(t)[1] == maximum(len.(l))   # padded to the batch's longest
                @test vec(sum(Array(mask); dims = 1)) == len.(l)
            end
            @test sort(labels) == 1:n                          # every sample once
            @test padded[1] == maximum(len.(1:n))              # the longest batch first
        end
        close(loader)
        close(ds)
    end
end
