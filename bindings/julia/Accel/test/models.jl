# Models, optimizers and schedulers; models of the caller's own tensors.
# Included by runtests.jl inside its top test set.

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
