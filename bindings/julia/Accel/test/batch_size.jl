# find_executable_batch_size in one process.
# Included by runtests.jl inside its top test set.

@testset "find_executable_batch_size" begin
    # Quiet: each retry is an info message.
    with_logger(NullLogger()) do
        Accelerator() do acc
            # Out of memory above 8: Accelerate's sizes, each 0.9 times the last, from 128 down.
            tried = Int[]
            found = find_executable_batch_size(acc) do n
                push!(tried, n)
                n > 8 && throw(AccelError(Accel.ERR_OUT_OF_MEMORY, "fake: out of memory at $n"))
            end
            @test found == 8
            @test tried == [128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36, 32, 28, 25, 22,
                            19, 17, 15, 13, 11, 9, 8]
            # Julia's own OutOfMemoryError is running out of memory too; the start is a keyword.
            tried = Int[]
            @test find_executable_batch_size(acc; starting_batch_size = 20) do n
                push!(tried, n)
                n > 16 && throw(OutOfMemoryError())
            end == 16
            @test tried == [20, 18, 16]
            # Any other exception stops the search and comes out as it was thrown: the same object.
            boom = ArgumentError("not a memory problem")
            tried = Int[]
            e = try
                find_executable_batch_size(acc; starting_batch_size = 64) do n
                    push!(tried, n)
                    n < 64 && throw(boom)
                    throw(AccelError(Accel.ERR_OUT_OF_MEMORY, "fake"))
                end
            catch e
                e
            end
            @test e === boom && tried == [64, 57]
            # An AccelError of a libaccel call inside (not out of memory) comes out unchanged too.
            m = mlp(4, 3, 2)
            e = error_of(() -> find_executable_batch_size(n -> m(rand(Float32, 5, n)), acc))
            @test e.status == Accel.ERR_SHAPE && e.cause === nothing
            # A try that runs is the answer at once.
            @test find_executable_batch_size(n -> m(y -> size(y), rand(Float32, 3, n)), acc) == 128
            # Nothing runs, or a start of 0: out of memory, with Accelerate's message.
            for start in (0, 3)
                e = error_of(() -> find_executable_batch_size(acc; starting_batch_size = start) do n
                    throw(AccelError(Accel.ERR_OUT_OF_MEMORY, "fake"))
                end)
                @test e.status == Accel.ERR_OUT_OF_MEMORY
                @test e.message == "No executable batch size found, reached zero."
            end
            close(m)
        end
    end
end
