# Configurations.
# Included by runtests.jl inside its top test set.

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
