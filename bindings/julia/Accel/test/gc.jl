# Garbage collection of forgotten handles.
# Included by runtests.jl inside its top test set.

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
