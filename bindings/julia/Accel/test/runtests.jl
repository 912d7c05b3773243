# The Julia binding's tests: julia --project=bindings/julia/Accel bindings/julia/Accel/test/runtests.jl
# (not Pkg.test, which wants the registry). Single-process tests first, then real processes over
# real Gloo under `accel launch`. The last line is "N passed, N failed".
using Accel
using Logging
using Test
include("counting.jl")
include("helpers.jl")

# The AccelError a call throws (or nothing).
function error_of(f)
    try
        f()
    catch e
        e isa AccelError && return e
        rethrow()
    end
    nothing
end

# Custom trackers of the tests (types are defined at the top level).
struct Recorder <: AbstractTracker   # every call it gets, in order
    calls::Vector{Any}
end
Accel.start(r::Recorder, project, config) = push!(r.calls, (:start, project, config))
Accel.log_values(r::Recorder, values, step) = push!(r.calls, (:log, values, step))
Accel.finish(r::Recorder) = push!(r.calls, (:finish,))

struct FailingLog <: AbstractTracker end   # start and finish: the defaults
Accel.log_values(::FailingLog, values, step) = throw(DomainError(step, "this tracker cannot log"))

struct FailingStart <: AbstractTracker end
Accel.start(::FailingStart, project, config) = error("cannot start $project")
Accel.log_values(::FailingStart, values, step) = nothing

struct Reentrant <: AbstractTracker   # logs from inside its log: refused
    acc::Accelerator
end
Accel.log_values(r::Reentrant, values, step) = log_values(r.acc, values)

struct NoLog <: AbstractTracker end

struct Sleepy <: AbstractTracker   # yields inside its log
    steps::Vector{Any}
end
Accel.log_values(s::Sleepy, values, step) = (sleep(0.05); push!(s.steps, step))

results = @testset CountingTestSet "Accel.jl" begin

@testset "library" begin
    @test Accel.library_version() == v"0.2.4"
    @test isfile(Accel.LIBRARY_PATH[])
    @test Accel.status_name(Accel.ERR_SHAPE) == "ACCEL_ERR_SHAPE"
    # Each way of finding the library, in a fresh process.
    probe = `$(julia_cmd()) -e 'using Accel; print(Accel.LIBRARY_PATH[])'`
    env = copy(ENV)
    delete!(env, "ACCEL_LIBRARY")
    env["PKG_CONFIG_PATH"] = joinpath(REPO_ROOT, "build", "uninstalled")
    code, out = run_output(setenv(probe, env))
    @test code == 0 && realpath(out) == realpath(joinpath(REPO_ROOT, "build", "lib", "libaccel.so.0.2"))
    env["ACCEL_LIBRARY"] = "/nonexistent/libaccel.so"
    code, out = run_output(setenv(probe, env))
    @test code != 0 && occursin("cannot open ACCEL_LIBRARY=/nonexistent/libaccel.so", out)
    delete!(env, "ACCEL_LIBRARY")
    env["PKG_CONFIG_PATH"] = mktempdir()
    code, out = run_output(setenv(probe, env))
    if code != 0   # unless a libaccel is installed system-wide
        @test occursin("ACCEL_LIBRARY (not set)", out) && occursin("pkg-config", out) &&
              occursin("system's library search path", out)
    end
end

@testset "every symbol of the header is called" begin
    listed = filter(l -> !isempty(l) && !startswith(l, "#"),
                    strip.(readlines(joinpath(REPO_ROOT, "tests", "abi", "symbols.txt"))))
    @test length(listed) >= 100
    source = join((read(joinpath(PACKAGE_DIR, "src", f), String)
                   for f in readdir(joinpath(PACKAGE_DIR, "src"))), "\n")
    # @acall/@check/@out write calls as name(args::T); the SYMBOLS list alone does not count.
    uncalled = filter(name -> !occursin(Regex("(@acall|@check|@out)\\(?[\\w{}, ]*?\\b$name\\("), source), listed)
    @test isempty(uncalled)
    isempty(uncalled) || println("never called: ", join(uncalled, ", "))
end

@testset "layout rule: Julia's dimensions reversed" begin
    A = reshape(Float32.(1:24), 2, 3, 4)
    t = Tensor(A)
    @test shape(t) == [4, 3, 2]
    @test size(t) == (2, 3, 4) && ndims(t) == 3 && length(t) == 24
    @test Array(t) == A
    # Row-major bytes of the library's [4, 3, 2] are Julia's column-major memory as it is.
    @test reinterpret(Float32, rawdata(t)) == vec(A)
    close(t)
    # A linear layer on a (features, batch) array: the library computes x W' + b on [batch,
    # features]; in Julia that is W' x .+ b with W of Julia size (in, out).
    m = Model()
    add_layer!(m, "fc", :linear; in_features = 3, out_features = 2)
    define!(m, "def forward(self, x):\n    return self.fc.forward(x)\n")
    x = rand(Float32, 3, 5)
    W, b = Array(m["fc.weight"]), Array(m["fc.bias"])
    @test size(W) == (3, 2)
    y = m(x)
    @test size(y) == (2, 5)
    @test Array(y) ≈ transpose(W) * x .+ b
    close(m)
    # Images of Julia size (28, 28, N) are the library's [N, 28, 28]: a batch of B is (28, 28, B).
    images = rand(UInt8, 28, 28, 10)
    labels = collect(UInt8, 0:9)
    Accelerator() do acc
        loader = DataLoader(acc, Dataset(images, labels); batch_size = 4)
        batches = [(Array(x), Array(y)) for (x, y) in loader]
        @test length(batches) == 3
        @test batches[1][1] == images[:, :, 1:4] && batches[1][2] == labels[1:4]
        @test size(batches[3][1]) == (28, 28, 2)
        idx = idx_dataset("$FASHION_MNIST/t10k-images-idx3-ubyte.gz", "$FASHION_MNIST/t10k-labels-idx1-ubyte.gz")
        @test length(idx) == 10000 && field_count(idx) == 2
        for (x, y) in DataLoader(acc, idx; batch_size = 8)
            @test size(x) == (28, 28, 8) && shape(x) == [8, 28, 28] && eltype(x) == UInt8
            @test size(y) == (8,)
            break
        end
    end
end

@testset "tensors" begin
    for T in (Float32, Float64, Float16, Int64, Int32, Int16, Int8, UInt8, Bool)
        A = T == Bool ? rand(Bool, 3, 2) : T.(reshape(0:5, 3, 2))
        Tensor(A) do t
            @test eltype(t) == T && Array(t) == A && Array{T}(t) == A
            @test Accel.datasize(t) == 6 * sizeof(T) == 6 * Accel.dtype_size(dtype(t))
        end
    end
    s = Tensor(2.5)
    @test shape(s) == Int64[] && size(s) == () && item(s) == 2.5 && Array(s)[] == 2.5
    @test item(Tensor(Int32(7))) === 7
    @test Array{Float64}(Tensor(Int32[1, 2])) == [1.0, 2.0]
    bf = Tensor(Accel.BF16, UInt8[0x80, 0x3f, 0x00, 0x40], (2,))   # 1.0 and 2.0
    @test dtype(bf) == Accel.BF16 && rawdata(bf) == UInt8[0x80, 0x3f, 0x00, 0x40]
    @test item(Float64, Tensor(Accel.BF16, UInt8[0x80, 0x3f], ())) == 1.0
    @test error_of(() -> Array(bf)).status == Accel.ERR_DTYPE
    e = error_of(() -> Tensor(Accel.F32, UInt8[1, 2, 3], (1,)))
    @test e.status == Accel.ERR_INVALID_ARGUMENT && occursin("need 4 bytes", e.message)
    @test error_of(() -> Tensor([1 + 2im])).status == Accel.ERR_DTYPE
    e = error_of(() -> item(Tensor(Float32[1, 2])))
    @test e.status == Accel.ERR_SHAPE && !isempty(e.message)
    @test error_of(() -> item(Int64, Tensor(1.5))).status == Accel.ERR_DTYPE
    p = Accel.borrow_torch(s)
    @test p != C_NULL
    w = Accel.wrap_torch(p)
    @test item(w) == 2.5
    close(w)
    close(s)
    close(s)   # idempotent
    @test !isopen(s)
    e = error_of(() -> item(s))
    @test e.status == Accel.ERR_STATE && occursin("used after close", e.message)
    @test occursin("closed", sprint(show, s))
end

@testset "configuration" begin
    Config(mixed_precision = "bf16") do cfg
        @test cfg["mixed_precision"] == "bf16"
        cfg[:gradient_accumulation_steps] = 4
        @test cfg["gradient_accumulation_steps"] == "4"
        cfg["rendezvous_timeout"] = 2.5
        @test parse(Float64, cfg["rendezvous_timeout"]) == 2.5
        @test occursin("mixed_precision: bf16", dump_yaml(cfg))
        e = error_of(() -> (cfg["mixed_precisoin"] = "bf16"))
        @test e.status == Accel.ERR_CONFIG && occursin("mixed_precisoin", e.message)
        e = error_of(() -> (cfg["mixed_precision"] = "fp9"))
        @test e.status == Accel.ERR_CONFIG && occursin("fp9", e.message)
        @test cfg["mixed_precision"] == "bf16"   # unchanged
        @test_throws ArgumentError (cfg["mixed_precision"] = [1])
        @test_throws ArgumentError (cfg["mixed_precision"] = "bf\0 16")
    end
    dir = mktempdir()
    path = joinpath(dir, "config.yaml")
    write(path, "compute_environment: LOCAL_MACHINE\nmixed_precision: bf16\nnum_processes: 1\n")
    Config(path) do cfg
        @test cfg["mixed_precision"] == "bf16"
    end
    write(path, "mixed_precision: bf16\nnum_procesess: 2\n")
    e = error_of(() -> Config(path))
    @test e.status == Accel.ERR_CONFIG && occursin("num_procesess", e.message) && occursin("config.yaml:2", e.message)
    @test error_of(() -> Config(joinpath(dir, "missing.yaml"))).status == Accel.ERR_IO
end

@testset "models, optimizers, schedulers" begin
    m = mlp(4, 3, 2)
    @test tensor_names(m) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    @test parameter_count(m) == 3 * 4 + 4 + 4 * 2 + 2
    @test error_of(() -> add_layer!(m, "x", :transformer; width = 3)).status == Accel.ERR_INVALID_ARGUMENT
    e = error_of(() -> define!(m, "def broken(self, x):\n    return x +\n"))
    @test e.status == Accel.ERR_INVALID_ARGUMENT && !isempty(e.message)
    @test error_of(() -> m(:nope, rand(Float32, 3, 1))).status == Accel.ERR_INVALID_ARGUMENT
    @test error_of(() -> m(rand(Float32, 5, 2))).status == Accel.ERR_SHAPE
    @test error_of(() -> m["nope"]).status == Accel.ERR_INVALID_ARGUMENT
    dir = mktempdir()
    save_torchscript(m, joinpath(dir, "m.pt"))
    m2 = load_torchscript(joinpath(dir, "m.pt"))
    @test Array(m2["fc1.weight"]) == Array(m["fc1.weight"])
    x = rand(Float32, 3, 4)
    @test Array(m2(x)) == Array(m(x))
    @test error_of(() -> load_torchscript(joinpath(dir, "none.pt"))).status == Accel.ERR_IO
    # The do-block form of a call closes its results, and gives what the block gives.
    kept = nothing
    @test m(x) do y
        kept = y
        size(y)
    end == (2, 4)
    @test !isopen(kept)
    testmode!(m)
    trainmode!(m)

    opt = Optimizer(m, :sgd; lr = 0.5, momentum = 0.9)
    @test lr(opt) == 0.5
    set_lr!(opt, 0.25)
    @test lr(opt) == 0.25
    @test error_of(() -> Optimizer(m, :lion)).status == Accel.ERR_INVALID_ARGUMENT
    @test error_of(() -> set!(opt, :betas, 1)).status == Accel.ERR_INVALID_ARGUMENT
    sched = Scheduler(opt, :linear; warmup_steps = 10, total_steps = 100)
    @test lr(sched) == 0.0
    step!(sched)
    @test lr(sched) ≈ 0.025
    @test lr(opt) ≈ 0.025
    @test !step_was_skipped(opt)
    foreach(close, (sched, opt, m, m2))
end

@testset "models of the caller's own tensors" begin
    w = Tensor(Float32[1, 2, 3])
    m = Model()
    e = error_of(() -> add_parameter!(m, "fc.weight", w))
    @test e.status == Accel.ERR_INVALID_ARGUMENT && occursin("does not require grad", e.message)
    set_requires_grad!(w)
    add_parameter!(m, "fc.weight", w)
    close(w)  # the model keeps its own reference
    e = error_of(() -> add_buffer!(m, "fc.weight", Tensor(Float32[0])))
    @test occursin("already has 'fc.weight'", e.message)
    @test tensor_names(m) == ["fc.weight"]
    @test forward(() -> 7, m) == 7
    e = error_of(() -> check_torch("0.1.0"))
    @test e.status == Accel.ERR_UNSUPPORTED && occursin("built against LibTorch 0.1.0", e.message)
    close(m)
end

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

@testset "split_between_processes and the trigger, one process" begin
    Accelerator() do acc
        # A world of one takes every item, unpadded, whatever the padding.
        @test split_between_processes(acc, ["a", "b", "c"]) == ["a", "b", "c"]
        @test split_between_processes(acc, [1, 2, 3]; apply_padding = true) == [1, 2, 3]
        @test split_between_processes(acc, Int[]) == Int[]
        @test split_between_processes(acc, view([5, 6, 7, 8], 2:4)) == [6, 7, 8]
        A = Float32[1 2 3; 4 5 6]
        @test split_between_processes(acc, A; apply_padding = true) == A
        t = Tensor(A)
        @test split_between_processes(Array, acc, t) == A
        close(t)
        @test error_of(() -> split_between_processes(acc, Tensor(1.0))).status == Accel.ERR_SHAPE
        # The trigger: set, seen once, then lowered.
        @test check_trigger(acc) == false
        set_trigger!(acc)
        @test check_trigger(acc) == true
        @test check_trigger(acc) == false
    end
end

@testset "dataloaders" begin
    Accelerator() do acc
        data = Dataset(Float32.(reshape(1:20, 2, 10)), collect(Int64, 1:10))
        loader = DataLoader(acc, data; batch_size = 3, shuffle = true, seed = 7)
        @test length(loader) == 4 && epoch(loader) == 0 && remainder(loader) == 1
        order(l) = vcat((Array(y) for (x, y) in l)...)
        first = order(loader)
        @test sort(first) == 1:10 && epoch(loader) == 1
        set_epoch!(loader, 0)
        @test order(loader) == first
        second = order(loader)
        @test second != first && sort(second) == 1:10
        # A batch lives for one turn of the loop.
        kept = nothing
        for (x, y) in loader
            kept = x
            @test isopen(x)
            @test end_of_epoch(loader) == false
            break
        end
        next_batch(loader)   # the loop's batch is closed when the loader moves on
        @test !isopen(kept)
        owned = next_batch(loader)
        @test all(isopen, owned)
        foreach(close, owned)
        @test position(loader)[2] == 9
        set_position!(loader, 3, 6)
        @test position(loader) == (3, 6)
        @test length(collect(Array(y) for (x, y) in loader)) == 2
        skip_first_batches!(loader, 2)
        @test length(collect(Array(y) for (x, y) in loader)) == 2
        @test error_of(() -> set!(loader, :batch_size, 0)).status == Accel.ERR_INVALID_ARGUMENT
        @test error_of(() -> set!(loader, :shuffel, true)).status == Accel.ERR_INVALID_ARGUMENT
        @test error_of(() -> Dataset(rand(Float32, 2, 3), rand(Float32, 4))).status == Accel.ERR_SHAPE
        @test error_of(() -> idx_dataset("/nonexistent/train-images-idx3-ubyte.gz")).status == Accel.ERR_IO
        close(loader)
        close(loader)
        @test error_of(() -> next_batch(loader)).status == Accel.ERR_STATE
    end
end

@testset "accelerator, one process" begin
    acc = Accelerator(gradient_accumulation_steps = 2)
    @test process_index(acc) == 0 && local_process_index(acc) == 0 && num_processes(acc) == 1
    @test is_main_process(acc) && is_local_main_process(acc)
    @test device(acc) == "cpu" && distributed_type(acc) == :NO && mixed_precision(acc) == :no
    @test occursin("gradient_accumulation_steps: 2", effective_config(acc))
    @test error_of(() -> Accelerator()).status == Accel.ERR_STATE   # one per process
    @test error_of(() -> Accelerator(mixed_precision = "fp8")).status == Accel.ERR_UNSUPPORTED

    set_seed(acc, 3)
    model = mlp(8, 4, 3)
    opt = Optimizer(model, :sgd; lr = 0.1)
    loader = DataLoader(acc, Dataset(rand(Float32, 4, 32), rand(0:2, 32)); batch_size = 8)
    @test prepare(acc, model, opt, loader) == (model, opt, loader)
    syncs = Bool[]
    before = Array(model["fc1.weight"])
    for (x, y) in loader
        accumulate_gradients!(acc) do
            loss = model(:training_step, x, y)
            backward(acc, loss)
            push!(syncs, sync_gradients(acc))
            norm = clip_grad_norm!(acc, model, 1e-3)
            syncs[end] && @test norm > 0
            clip_grad_value!(acc, model, 1.0)
            step!(opt)
            zero_grad!(opt)
            close(loss)
        end
    end
    @test syncs == [false, true, false, true]
    @test Array(model["fc1.weight"]) != before

    # Collectives are the identity on one process; the result has the argument's form (a number
    # gives a number, gather's a Vector; an array an Array; a Tensor a Tensor).
    @test gather(acc, Float32[1, 2]) == Float32[1, 2] && gather(acc, 1.5) == [1.5]
    @test reduce_across(acc, [1.0, 2.0]; reduction = :max) == [1.0, 2.0]
    @test reduce_across(acc, 2.0f0) === 2.0f0 && reduce_across(acc, 1.5; reduction = :mean) === 1.5
    @test reduce_across(acc, 1.5; reduction = "min") === 1.5
    r = reduce_across(acc, Tensor(Int32[3]))
    @test r isa Tensor && Array(r) == Int32[3]
    close(r)
    kept = nothing
    @test reduce_across(acc, Tensor(2.5)) do t
        kept = t
        item(t)
    end == 2.5
    @test !isopen(kept)   # the do-block form closed the result
    @test error_of(() -> reduce_across(acc, [1.0]; reduction = :median)).status == Accel.ERR_INVALID_ARGUMENT
    @test error_of(() -> reduce_across(acc, 3; reduction = :mean)).status == Accel.ERR_DTYPE
    @test_throws ArgumentError reduce_across(acc, "text")
    @test error_of(() -> reduce_across(acc, 1 + 2im)).status == Accel.ERR_DTYPE
    # Base's reduce of a number returns it untouched: the 0.2.0 spelling is refused, not obeyed.
    e = try reduce(acc, 1.5) catch e e end
    @test e isa ArgumentError && occursin("reduce_across", e.msg)
    @test broadcast_across(acc, Int32[4, 5]) == Int32[4, 5] && broadcast_across(acc, 7) === 7
    @test gather(Array, acc, Tensor(Float32[1, 2])) == Float32[1, 2]
    # Ranks count from 0: the only rank here is 0.
    e = error_of(() -> broadcast_across(acc, 1.0; from = 1))
    @test e.status == Accel.ERR_INVALID_ARGUMENT && occursin("ranks count from 0", e.message) && occursin("0:0", e.message)
    @test pad_across_processes(acc, ones(Float32, 2, 3); dim = 1, pad_value = -1) == ones(Float32, 2, 3)
    @test error_of(() -> pad_across_processes(acc, ones(Float32, 2); dim = 2)).status == Accel.ERR_INVALID_ARGUMENT
    @test gather_object(acc, Dict("a" => [1, 2])) == [Dict("a" => [1, 2])]
    @test gather_bytes(acc, UInt8[]) == [UInt8[]]
    @test gather_for_metrics(acc, Int64[1, 0, 1]) == [1, 0, 1]
    # The package's own verbs: no method of Base's broadcast or accumulate is the package's.
    @test all(f -> all(m -> m.module !== Accel, methods(f)), (broadcast, accumulate, accumulate!))
    @test main_process_first(() -> 42, acc) == 42
    @test_throws ErrorException main_process_first(() -> error("inside"), acc)
    wait_for_everyone(acc)   # main_process_first's end ran despite the error
    # join_uneven_inputs is off in a world of one: f runs and its value or exception comes out;
    # the end runs whatever f does (another join opens after it); a join inside one is ERR_STATE.
    @test join_uneven_inputs(() -> 7, acc) == 7
    for even in (nothing, true, false)
        @test join_uneven_inputs(acc; even_batches = even) do
            n = 0
            for (x, y) in loader
                train_step!(acc, model, opt, x, y)
                n += 1
            end
            n
        end == 4
    end
    @test_throws ErrorException join_uneven_inputs(() -> error("inside"), acc)
    e = error_of(() -> join_uneven_inputs(() -> broadcast_across(acc, 1.0; from = 1), acc))
    @test e.status == Accel.ERR_INVALID_ARGUMENT   # f's own AccelError, as it was
    e = error_of(() -> join_uneven_inputs(() -> join_uneven_inputs(() -> 1, acc), acc; even_batches = false))
    @test e.status == Accel.ERR_STATE && occursin("already open", e.message)
    @test join_uneven_inputs(() -> "after", acc) == "after"
    println(acc, "printed by the main process: ", 1, " ", 2.5)

    # Checkpoints: weights, the whole state, and the program's own objects.
    dir = mktempdir()
    save_model(acc, model, joinpath(dir, "weights"))
    @test isfile(joinpath(dir, "weights", "model.safetensors"))
    other = mlp(8, 4, 3)
    load_checkpoint_in_model(other, joinpath(dir, "weights"))
    @test Array(other["fc2.weight"]) == Array(model["fc2.weight"])
    @test error_of(() -> load_checkpoint_in_model(mlp(9, 4, 3), joinpath(dir, "weights"))).status == Accel.ERR_SHAPE
    counter = Ref(17)
    register_for_checkpointing(acc; save = io -> write(io, counter[]),
                                    load = bytes -> (counter[] = reinterpret(Int, bytes)[1]))
    saved = Array(model["fc1.weight"])
    save_state(acc, joinpath(dir, "state"))
    counter[] = 0
    for (x, y) in loader
        train_step!(acc, model, opt, x, y)
    end
    @test Array(model["fc1.weight"]) != saved
    load_state(acc, joinpath(dir, "state"))
    @test Array(model["fc1.weight"]) == saved && counter[] == 17
    @test error_of(() -> load_state(acc, joinpath(dir, "nowhere"))).status == Accel.ERR_IO
    register_for_checkpointing(acc; save = io -> throw(ArgumentError("cannot save this")), load = bytes -> nothing)
    e = error_of(() -> save_state(acc, joinpath(dir, "state2")))
    @test e.status == Accel.ERR_CALLBACK && e.cause[1] isa ArgumentError
    @test !isdir(joinpath(dir, "state2"))
    foreach(close, (loader, opt, model, other))
    close(acc)
    @test error_of(() -> process_index(acc)).status == Accel.ERR_STATE
end

@testset "trackers" begin
    # Values from Julia collections, in their order; read back as the trackers get them.
    values = Accel.Values((loss = 0.5, note = "hi", n = 3, flag = true, optimizer = :adamw, bad = NaN))
    got = Accel.read_values(values)
    @test got isa TrackedValues
    @test isequal(got, ["loss" => 0.5, "note" => "hi", "n" => 3.0, "flag" => 1.0,
                        "optimizer" => "adamw", "bad" => NaN])
    close(values)
    values = Accel.Values(["b" => 1, "a" => 2, :b => 3])   # a name given twice keeps its place
    @test Accel.read_values(values) == ["b" => 3.0, "a" => 2.0]
    close(values)
    values = Accel.Values(Dict("x" => Inf))
    @test Accel.read_values(values) == ["x" => Inf]
    close(values)
    @test_throws ArgumentError Accel.Values((x = [1, 2],))
    @test_throws ArgumentError Accel.Values((x = nothing,))
    @test_throws ArgumentError Accel.Values([1 => 2.0])
    @test_throws ArgumentError Accel.Values(42)
    @test_throws ArgumentError Accel.Values(["a" => "b\0c"])
    @test error_of(() -> Accel.Values(("" => 1,))).status == Accel.ERR_INVALID_ARGUMENT
    # Accelerate's log is Base's logarithm: the package's verb is log_values, no method of log.
    @test all(m -> m.module !== Accel, methods(log))

    e = error_of(() -> Accelerator(log_with = "wandb"))
    @test e.status == Accel.ERR_CONFIG && occursin("wandb", e.message)

    dir = mktempdir()
    rec = Recorder(Any[])
    Accelerator(log_with = "jsonl", logging_dir = dir) do acc
        e = error_of(() -> log_values(acc, (loss = 1.0,)))
        @test e.status == Accel.ERR_STATE && occursin("init_trackers", e.message)
        @test add_tracker!(acc, "recorder", rec) === acc
        @test_throws ArgumentError add_tracker!(acc, "nolog", NoLog())
        @test error_of(() -> add_tracker!(acc, "recorder", Recorder(Any[]))).status == Accel.ERR_INVALID_ARGUMENT
        @test error_of(() -> add_tracker!(acc, "jsonl", Recorder(Any[]))).status == Accel.ERR_INVALID_ARGUMENT
        @test error_of(() -> init_trackers(acc, "a/b")).status == Accel.ERR_INVALID_ARGUMENT

        init_trackers(acc, "run1"; config = (lr = 0.001, optimizer = "adamw"))
        @test error_of(() -> init_trackers(acc, "run1")).status == Accel.ERR_STATE
        @test error_of(() -> add_tracker!(acc, "late", Recorder(Any[]))).status == Accel.ERR_STATE
        log_values(acc, (loss = 0.5, note = "first"); step = 1)
        log_values(acc, "b" => 2, "a" => 1)            # no step
        log_values(acc, Dict("only" => 7); step = 3)
        @test error_of(() -> log_values(acc, (x = 1,); step = -1)).status == Accel.ERR_INVALID_ARGUMENT
        end_training(acc)
        end_training(acc)   # no run: nothing to do
        @test error_of(() -> log_values(acc, (loss = 1.0,))).status == Accel.ERR_STATE
        @test rec.calls == [(:start, "run1", ["lr" => 0.001, "optimizer" => "adamw"]),
                            (:log, ["loss" => 0.5, "note" => "first"], 1),
                            (:log, ["b" => 2.0, "a" => 1.0], nothing),
                            (:log, ["only" => 7.0], 3),
                            (:finish,)]
        @test rec.calls[2][2] isa TrackedValues
        lines = readlines(joinpath(dir, "run1", "metrics.jsonl"))
        @test length(lines) == 3
        @test startswith(lines[1], "{\"step\": 1, \"wall_time\": ") &&
              endswith(lines[1], ", \"values\": {\"loss\": 0.5, \"note\": \"first\"}}")
        @test startswith(lines[2], "{\"step\": null, ") && endswith(lines[2], "{\"b\": 2, \"a\": 1}}")
        @test startswith(lines[3], "{\"step\": 3, ") && endswith(lines[3], "{\"only\": 7}}")
        @test occursin("\"lr\": 0.001", read(joinpath(dir, "run1", "hparams.json"), String))

        # A tracker that throws: the call throws ERR_CALLBACK with the exception as its cause,
        # after every tracker got the values (the file its line, the recorder its call).
        add_tracker!(acc, "failing", FailingLog())
        init_trackers(acc, "run2")
        e = error_of(() -> log_values(acc, (loss = 0.25,); step = 5))
        @test e.status == Accel.ERR_CALLBACK && occursin("failing", e.message)
        @test e.cause !== nothing && e.cause[1] isa DomainError && e.cause[1].val == 5
        @test occursin("this tracker cannot log", sprint(showerror, e))
        lines = readlines(joinpath(dir, "run2", "metrics.jsonl"))
        @test length(lines) == 1 && startswith(lines[1], "{\"step\": 5, ")
        @test rec.calls[end] == (:log, ["loss" => 0.25], 5)
        e = error_of(() -> log_values(acc, (loss = 0.125,); step = 6))   # each call its own failure
        @test e.status == Accel.ERR_CALLBACK && e.cause[1].val == 6
        end_training(acc)
        @test rec.calls[end] == (:finish,)

        # A start that throws: nothing half-started, the trackers already started are finished.
        add_tracker!(acc, "failing start", FailingStart())
        n = length(rec.calls)
        e = error_of(() -> init_trackers(acc, "run3"; config = ["seed" => 1]))
        @test e.status == Accel.ERR_CALLBACK && occursin("failing start", e.message)
        @test e.cause[1] isa ErrorException && occursin("cannot start run3", e.cause[1].msg)
        @test rec.calls[n+1:end] == [(:start, "run3", ["seed" => 1.0]), (:finish,)]
        @test error_of(() -> log_values(acc, (loss = 1.0,))).status == Accel.ERR_STATE
    end

    # The do-block form ends the run, after an exception too (which is what comes out); closing
    # the accelerator ends a started run; a tracker's method may not log.
    rec = Recorder(Any[])
    Accelerator(log_with = "jsonl,csv", project_dir = dir) do acc
        add_tracker!(acc, "recorder", rec)
        @test init_trackers(acc, "run4") do
            log_values(acc, [:accuracy => 0.75]; step = 0)
            42
        end == 42
        @test rec.calls == [(:start, "run4", []), (:log, ["accuracy" => 0.75], 0), (:finish,)]
        @test isfile(joinpath(dir, "run4", "metrics.csv"))
        @test_throws DomainError init_trackers(() -> throw(DomainError(1)), acc, "run4")
        @test rec.calls[end] == (:finish,)
        @test error_of(() -> log_values(acc, (loss = 1.0,))).status == Accel.ERR_STATE
        init_trackers(acc, "run4")
    end
    @test rec.calls[end] == (:finish,) && count(==((:finish,)), rec.calls) == 3
    @test length(readlines(joinpath(dir, "run4", "metrics.jsonl"))) == 1   # appended runs

    Accelerator() do acc   # no log_with: custom trackers alone, no files
        add_tracker!(acc, "reentrant", Reentrant(acc))
        init_trackers(acc, "run5")
        e = error_of(() -> log_values(acc, (loss = 1.0,)))
        @test e.status == Accel.ERR_CALLBACK
        @test e.cause[1] isa AccelError && e.cause[1].status == Accel.ERR_STATE
        @test error_of(() -> log_values(acc, ())).status == Accel.ERR_CALLBACK   # no values: still a call
    end
    # Another task's call while a tracker's method waits (yielded) waits for that call to end.
    sleepy = Sleepy(Any[])
    Accelerator(log_with = "jsonl", logging_dir = dir) do acc
        add_tracker!(acc, "sleepy", sleepy)
        init_trackers(acc, "run6") do
            other = @async log_values(acc, (x = 2,); step = 2)
            log_values(acc, (x = 1,); step = 1)
            wait(other)
        end
    end
    @test sleepy.steps == [1, 2]
    @test length(readlines(joinpath(dir, "run6", "metrics.jsonl"))) == 2
    # A warning the library raises itself (a torn line a killed run left, moved aside) reaches
    # the program's logger as its own messages do, at Warn.
    mkpath(joinpath(dir, "run7"))
    write(joinpath(dir, "run7", "metrics.jsonl"), "{\"st")
    Accelerator(log_with = "jsonl", logging_dir = dir) do acc
        mine = Test.TestLogger()
        set_log_sink!(acc, mine)
        init_trackers(acc, "run7") do
            nothing
        end
        @test [(r.level, occursin("metrics.jsonl.torn-1", r.message)) for r in mine.logs] ==
              [(Logging.Warn, true)]
    end
    @test read(joinpath(dir, "run7", "metrics.jsonl.torn-1"), String) == "{\"st"
end

@testset "logging" begin
    # Python's numbers against Julia's levels, both ways.
    @test Accel.julia_level.((0, 10, 20, 30, 40, 50)) ==
          (LogLevel(-2000), Logging.Debug, Logging.Info, Logging.Warn, Logging.Error,
           LogLevel(2001))
    @test Accel.julia_level.((25, 45, 51)) == (LogLevel(500), Logging.Error, LogLevel(2101))
    @test Accel.library_level.((Logging.Debug, Logging.Info, Logging.Warn, Logging.Error,
                                Logging.Error + 1, Logging.BelowMinLevel, Logging.AboveMaxLevel)) ==
          (10, 20, 30, 40, 50, 0, 1000)
    @test all(c -> Accel.library_level(Accel.julia_level(c)) == c, [0:40; 50:1000])

    Accelerator() do acc
        # Every message reaches the task's logger with its level, text, module, group and rank;
        # the accelerator's level drops what is below it first.
        @test log_level(acc) == Logging.Info
        logger = Test.TestLogger(min_level = Logging.Debug)
        with_logger(logger) do
            log_message(acc, Logging.Info, "hello")
            log_message(acc, Logging.Debug, "below the accelerator's level")
            log_message(acc, Logging.Warn, "from every process"; main_process_only = false)
            log_message(acc, Logging.Error, "in order"; main_process_only = false, in_order = true)
            log_message(acc, 50, "critical")
            log_message(acc, 35, "between warning and error")
            @test set_log_level!(acc, Logging.Debug) === acc
            log_message(acc, Logging.Debug, "debug")
            set_log_level!(acc, 40)
            log_message(acc, Logging.Warn, "below error")
        end
        @test log_level(acc) == Logging.Error
        @test [(r.level, r.message) for r in logger.logs] ==
              [(Logging.Info, "hello"), (Logging.Warn, "from every process"),
               (Logging.Error, "in order"), (LogLevel(2001), "critical"),
               (LogLevel(1500), "between warning and error"), (Logging.Debug, "debug")]
        @test all(r -> r._module === Accel && r.group === :libaccel &&
                       Dict(r.kwargs) == Dict(:rank => 0, :processes => 1), logger.logs)
        # The program's logger has the last word: its level, after the accelerator's.
        set_log_level!(acc, Logging.Debug)
        @test_logs (:warn, "warned") min_level = Logging.Warn begin
            log_message(acc, Logging.Info, "not at the logger's level")
            log_message(acc, Logging.Warn, "warned")
        end
        @test error_of(() -> log_message(acc, 1001, "x")).status == Accel.ERR_INVALID_ARGUMENT
        @test error_of(() -> set_log_level!(acc, -1)).status == Accel.ERR_INVALID_ARGUMENT
        @test_throws ArgumentError log_message(acc, Logging.Info, "a\0b")

        # Sinks: a logger of the program's, whatever the task's; a function; one that throws,
        # reported with its exception; one that logs or replaces the sink, refused; the library's
        # lines on standard error; Julia's logging again.
        mine = Test.TestLogger()
        @test set_log_sink!(acc, mine) === acc
        @test_logs log_message(acc, Logging.Info, "to the program's logger")
        @test [(r.message, r.kwargs[:rank]) for r in mine.logs] == [("to the program's logger", 0)]
        got = []
        set_log_sink!(acc, (level, message, rank) -> push!(got, (level, message, rank)))
        log_message(acc, Logging.Warn, "to a function")
        @test got == [(Logging.Warn, "to a function", 0)]
        set_log_sink!(acc, (level, message, rank) -> throw(DomainError(rank, "can't log $message")))
        e = error_of(() -> log_message(acc, Logging.Info, "this"))
        @test e.status == Accel.ERR_CALLBACK && e.cause[1] isa DomainError
        @test occursin("can't log this", sprint(showerror, e))
        set_log_sink!(acc, (level, message, rank) -> log_message(acc, level, message))
        e = error_of(() -> log_message(acc, Logging.Info, "again"))
        @test e.status == Accel.ERR_CALLBACK && e.cause[1].status == Accel.ERR_STATE
        set_log_sink!(acc, (level, message, rank) -> set_log_sink!(acc))
        e = error_of(() -> log_message(acc, Logging.Info, "replaced"))
        @test e.status == Accel.ERR_CALLBACK && e.cause[1].status == Accel.ERR_STATE
        set_log_sink!(acc, nothing)
        path = tempname()
        open(path, "w") do io
            redirect_stderr(() -> log_message(acc, Logging.Warn, "the library's line"), io)
        end
        @test read(path, String) == "WARNING: the library's line\n"
        set_log_sink!(acc)
        @test_logs (:info, "Julia's again") log_message(acc, Logging.Info, "Julia's again")
    end

    # The level from the environment and from the configuration.
    withenv("ACCELERATE_LOG_LEVEL" => "warning") do
        Accelerator() do acc
            @test log_level(acc) == Logging.Warn
            @test_logs (:warn, "passes") begin
                log_message(acc, Logging.Info, "dropped")
                log_message(acc, Logging.Warn, "passes")
            end
        end
    end
    Accelerator(log_level = "critical") do acc
        @test log_level(acc) == LogLevel(2001)
    end
end

# Makes tensors, function datasets and loaders over them (a batch taken), keeping only weak
# references: in a function, so that no local of the test keeps them.
function forget_handles(acc)
    forgotten = WeakRef[]
    for round in 1:5
        for i in 1:200
            push!(forgotten, WeakRef(Tensor(rand(Float32, 16))))
        end
        ds = Dataset((i, x) -> (x[] = i), 32, Float64 => ())
        loader = DataLoader(acc, ds; batch_size = 8)
        next_batch(loader)
        push!(forgotten, WeakRef(ds), WeakRef(loader), WeakRef(ds.source))
    end
    forgotten
end

@testset "garbage collection frees forgotten handles" begin
    # Handles left to the finalizers, function datasets and their loaders included: every one is
    # collected (nothing in the package keeps a forgotten handle or a dataset function's state
    # alive; a finalizable object goes in the collection after its finalizer ran), the finalizers
    # free them without harm, and the library keeps working.
    Accelerator() do acc
        forgotten = forget_handles(acc)
        GC.gc(); GC.gc()
        @test length(forgotten) == 5 * 203
        @test all(r -> r.value === nothing, forgotten)
        ds = Dataset((i, x) -> (x[] = i), 32, Float64 => ())
        @test sum(sum(Array(y)) for (y,) in DataLoader(acc, ds; batch_size = 8)) == sum(1:32)
    end
end

@testset "two processes under accel launch" begin
    code, out = run_output(launch(2, joinpath(PACKAGE_DIR, "examples", "collectives.jl")))
    @test code == 0
    lines = split(out, '\n')
    for line in ["rank 0 of 2 (local rank 0) on cpu, main process",
                 "rank 1 of 2 (local rank 1) on cpu",
                 "distributed type MULTI_CPU, mixed precision no, libaccel 0.2.4",
                 "gather                   shape [4] values 0 1 10 11",
                 "pad + gather             shape [4] values 1 -1 1 1",
                 "reduce sum of rank+1     shape [] values 3",
                 "reduce mean of rank+1    shape [] values 1.5",
                 "broadcast from last rank shape [3] values 3.5 4.5 5.5",
                 "gather_object[0]       \"hello from rank 0\"",
                 "gather_object[1]       \"hello from rank 1\""]
        @test line in lines
    end
    code == 0 || println(out)

    code, out = run_output(launch(2, joinpath(@__DIR__, "ranks.jl"), "train"))
    @test code == 0
    @test "rank 0: the loss fell, parameters equal on every rank" in split(out, '\n')
    @test "rank 1: the loss fell, parameters equal on every rank" in split(out, '\n')
    # The same run: join_uneven_inputs with 3 batches on rank 0 and 2 on rank 1 (test/ranks.jl).
    @test "rank 0: 3 steps in join_uneven_inputs, parameters equal on every rank" in split(out, '\n')
    @test "rank 1: 2 steps in join_uneven_inputs, parameters equal on every rank" in split(out, '\n')
    # The same run: split_between_processes and the trigger on two ranks (test/ranks.jl).
    @test "rank 0: split [1, 2], padded [1, 2]; the trigger of rank 1 seen, then lowered" in split(out, '\n')
    @test "rank 1: split [3], padded [3, 3]; the trigger of rank 1 seen, then lowered" in split(out, '\n')
    # And a stream of 5 samples in batches of 1, dispatched and not (test/ranks.jl).
    @test "rank 0: stream labels [[0], [2], [4]], dispatched and not" in split(out, '\n')
    @test "rank 1: stream labels [[1], [3], [0]], dispatched and not" in split(out, '\n')
    # And the logger (test/ranks.jl): the main process's message once, every process's once per
    # rank with its rank, the in-order ones in rank order, nothing below the level; a sink failing
    # in order on rank 1 fails there alone.
    logged = filter(l -> startswith(l, "log "), split(out, '\n'))
    @test count(==("log Info rank 0/2: once, from the main process"), logged) == 1
    @test count(l -> occursin("once, from the main process", l), logged) == 1
    @test count(==("log Warn rank 0/2: from every rank"), logged) == 1
    @test count(==("log Warn rank 1/2: from every rank"), logged) == 1
    @test filter(l -> occursin("in order", l), logged) ==
          ["log Info rank $r/2: in order, turn $t" for t in 1:3 for r in 0:1]
    @test !any(l -> occursin("below the level", l), logged)
    @test "rank 0: logged, a failing sink reported on rank 1 alone" in split(out, '\n')
    @test "rank 1: logged, a failing sink reported on rank 1 alone" in split(out, '\n')
    code == 0 || println(out)

    # One process x 64 against two x 32: the same parameters.
    dir = mktempdir()
    one, two = joinpath(dir, "1x64.txt"), joinpath(dir, "2x32.txt")
    c1, o1 = run_output(launch(1, joinpath(@__DIR__, "ranks.jl"), "equiv", "64", one))
    c2, o2 = run_output(launch(2, joinpath(@__DIR__, "ranks.jl"), "equiv", "32", two))
    @test c1 == 0 && c2 == 0
    read_params(path) = Dict(let w = split(l); w[1] => parse.(Float64, w[2:end]) end for l in readlines(path))
    # The 4 parameters in files `a` and `b`, each within `tolerance` x its largest value.
    function params_close(a, b, tolerance)
        x, y = read_params(a), read_params(b)
        @test length(x) == 4 && keys(x) == keys(y)
        for (name, values) in x
            @test maximum(abs.(values .- y[name])) <= tolerance * maximum(abs.(values))
        end
    end
    if c1 == 0 && c2 == 0
        params_close(one, two, 1e-5)
    else
        println(o1, o2)
    end

    # ZeRO stage 2 chosen through the configuration (each rank steps, and keeps the gradients of,
    # the parameters it owns) trains to what stage 0 does, with AdamW on two ranks.
    plain, sharded, state = joinpath(dir, "stage0.txt"), joinpath(dir, "stage2.txt"), joinpath(dir, "state")
    c1, o1 = run_output(launch(2, joinpath(@__DIR__, "ranks.jl"), "equiv", "32", plain, "adamw"))
    c2, o2 = run_output(launch(2, joinpath(@__DIR__, "ranks.jl"), "equiv", "32", sharded, "adamw", "2", state))
    @test c1 == 0 && c2 == 0
    if c1 == 0 && c2 == 0
        params_close(plain, sharded, 1e-6)
        # The job was sharded: each rank saved its own part of the optimizer state.
        @test isfile(joinpath(state, "optimizer_0.rank_0.safetensors"))
        @test isfile(joinpath(state, "optimizer_0.rank_1.safetensors"))
    else
        println(o1, o2)
    end

    # The example on two ranks: the loss falls, the accuracy is already well above chance.
    code, out = run_output(launch(2, joinpath(PACKAGE_DIR, "examples", "train_fashion_mnist.jl"), "--max-steps", "300"))
    @test code == 0
    losses = values_after(out, " loss ")
    @test length(losses) == 3 && losses[3] < losses[1]
    accuracy = values_after(out, "test accuracy ")
    @test length(accuracy) == 1 && accuracy[1] >= 0.7
    code == 0 || println(out)
end

@testset "the Julia example prints what the C example prints" begin
    args = ["--max-steps", "200", "--workers", "0"]
    c_code, from_c = run_output(`$(joinpath(c_examples_dir(), "train_fashion_mnist")) $args`)
    j_code, from_julia = run_output(`$(julia_cmd()) $(joinpath(PACKAGE_DIR, "examples", "train_fashion_mnist.jl")) $args`)
    # Everything but the timings, and the messages' text alone: the C example's logger writes
    # "INFO: text" (or printed it before), Julia's ConsoleLogger "┌ Info: text" and the fields.
    function keep(out)
        lines = filter(l -> !startswith(l, "│") && !startswith(l, "└"), split(strip(out), '\n'))
        map(lines) do line
            line = replace(line, r"^(INFO: |┌ Info: |\[ Info: )" => "")
            line = split(line, " after ")[1]
            parts = split(line, " loss ")
            length(parts) == 2 ? parts[1] * " loss " * split(parts[2])[1] : line
        end
    end
    @test c_code == 0 && j_code == 0
    @test keep(from_c) == keep(from_julia) && length(keep(from_c)) == 4
    keep(from_c) == keep(from_julia) || println("C:\n", from_c, "\nJulia:\n", from_julia)
end

end # the top test set

exit(results.failed == 0 ? 0 : 1)
