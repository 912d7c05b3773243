# Data loaders.
# Included by runtests.jl inside its top test set.

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
