# An accelerator in one process.
# Included by runtests.jl inside its top test set.

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
        only(t)
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
