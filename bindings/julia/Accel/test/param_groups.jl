# Optimizer parameter groups.
# Included by runtests.jl inside its top test set.

@testset "optimizer parameter groups" begin
    m = mlp(4, 3, 2)
    opt = Optimizer(m, :sgd; lr = 0.1)
    @test group_count(opt) == 1 && lr(opt, 1) == 0.1
    # Groups count from 1: group 1 is the optimizer's own; the first added is 2.
    @test add_group!(opt, ["fc1.bias", "fc2.bias"]; lr = 0.01) == 2
    @test add_group!(opt, ("fc2.weight",)) == 3   # starts from the defaults: lr 0.1
    @test group_count(opt) == 3
    @test (lr(opt, 1), lr(opt, 2), lr(opt, 3)) == (0.1, 0.01, 0.1)
    set_group!(opt, 3, :lr, 0.5)
    set_group!(opt, 1; lr = 0.2)   # group 1's own, not the defaults later groups start from
    @test (lr(opt), lr(opt, 1), lr(opt, 3)) == (0.2, 0.2, 0.5)
    @test add_group!(opt, ["fc1.weight"]) == 4 && lr(opt, 4) == 0.1
    for group in (0, 5)
        e = error_of(() -> lr(opt, group))
        @test e.status == Accel.ERR_INVALID_ARGUMENT && occursin("here 1:4", e.message)
    end
    e = error_of(() -> add_group!(opt, ["fc1.bias"]))
    @test e.status == Accel.ERR_INVALID_ARGUMENT && occursin("fc1.bias", e.message)
    @test error_of(() -> add_group!(opt, ["nope"])).status == Accel.ERR_INVALID_ARGUMENT
    @test error_of(() -> add_group!(opt, String[])).status == Accel.ERR_INVALID_ARGUMENT
    @test error_of(() -> set_group!(opt, 2, :betas, 1)).status == Accel.ERR_INVALID_ARGUMENT
    # A scheduler scales each group's own rate, and no group may be added after it.
    sched = Scheduler(opt, :linear; warmup_steps = 0, total_steps = 10)
    @test error_of(() -> add_group!(opt, ["fc2.bias"])).status == Accel.ERR_STATE
    step!(sched)
    @test lr(opt, 2) / lr(opt, 3) ≈ 0.01 / 0.5
    foreach(close, (sched, opt, m))
end
