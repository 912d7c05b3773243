# The library itself: its version and the header's every symbol.
# Included by runtests.jl inside its top test set.

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
    # bindings/left_out.txt's functions for julia, each with its reason, are not called.
    left_out = Set(split(l)[2] for l in readlines(joinpath(REPO_ROOT, "bindings", "left_out.txt"))
                   if length(split(l)) >= 2 && split(l)[1] == "julia")
    uncalled = filter(name -> !(name in left_out) &&
                              !occursin(Regex("(@acall|@check|@out)\\(?[\\w{}, ]*?\\b$name\\("), source),
                      listed)
    @test isempty(uncalled)
    isempty(uncalled) || println("never called: ", join(uncalled, ", "))
end
