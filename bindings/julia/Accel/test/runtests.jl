# The Julia binding's tests: julia --project=bindings/julia/Accel bindings/julia/Accel/test/runtests.jl
# (not Pkg.test, which wants the registry). Single-process tests first, then real processes over
# real sockets under `accel launch`. The last line is "N passed, N failed".
using Accel
# The generic names Accel does not export (they would clash with Flux, MLUtils or Base).
using Accel: DataLoader, Model, Optimizer, Scheduler, call, device, shape, gather, trainmode!, testmode!
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

results = @testset CountingTestSet "Accel.jl" begin
    include("core.jl")
    include("tensors.jl")
    include("config.jl")
    include("models.jl")
    include("pretrained.jl")
    include("bigmodel.jl")
    include("tokenizer.jl")
    include("param_groups.jl")
    include("clip_grad.jl")
    include("datasets.jl")
    include("streams.jl")
    include("collectives.jl")
    include("dataloaders.jl")
    include("accelerator.jl")
    include("process_helpers.jl")
    include("batch_size.jl")
    include("local_sgd.jl")
    include("profiler.jl")
    include("trackers.jl")
    include("logging.jl")
    include("trainer.jl")
    include("idioms.jl")
    include("gc.jl")
    include("multiprocess.jl")
    include("multiprocess_step_tools.jl")
end # the top test set

exit(results.failed == 0 ? 0 : 1)
