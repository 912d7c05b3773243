# no_sync and LocalSGD in one process.
# Included by runtests.jl inside its top test set.

@testset "no_sync and LocalSgd, one process" begin
    Accelerator() do acc
        model = mlp(8, 4, 3)
        opt = Optimizer(model, :sgd; lr = 0.1)
        prepare(acc, model, opt)
        x, y = rand(Float32, 4, 8), rand(0:2, 8)
        grad_norm() = clip_grad_norm!(acc, model, 1e9)   # clips nothing
        # Inside no_sync the gradients of two backwards add up (nothing is held back with one
        # process); the block's value comes out, and its exception after the end ran.
        model(l -> backward(acc, l), :training_step, x, y)
        once = grad_norm()
        zero_grad!(opt)
        @test no_sync(acc, model) do
            model(l -> backward(acc, l), :training_step, x, y)
            no_sync(acc, model) do   # blocks nest
                model(l -> backward(acc, l), :training_step, x, y)
            end
            :done
        end == :done
        @test grad_norm() ≈ 2 * once
        zero_grad!(opt)
        @test_throws ErrorException no_sync(() -> error("inside"), acc, model)
        @test no_sync(() -> 1, acc, model) == 1

        # LocalSGD with one process only counts steps: no average, ever.
        e = error_of(() -> LocalSgd(acc, model, 0))
        @test e.status == Accel.ERR_INVALID_ARGUMENT
        local_sgd = LocalSgd(acc, model, 2)
        for i in 1:5
            train_step!(acc, model, opt, x, y)
            @test step!(local_sgd) === local_sgd
        end
        @test average_count(local_sgd) == 0
        finish!(local_sgd)
        finish!(local_sgd)   # a second end does nothing
        @test average_count(local_sgd) == 0
        close(local_sgd)
        @test error_of(() -> step!(local_sgd)).status == Accel.ERR_STATE   # used after close
        # The do-block form: finish! at the end, the block's value; when the block throws, the
        # handle is freed without the last average and the exception goes on.
        kept = nothing
        @test LocalSgd(acc, model, 3; outer_optimizer = :nesterov) do l
            kept = l
            train_step!(acc, model, opt, x, y)
            step!(l)
            average_count(l)
        end == 0
        @test !isopen(kept)
        @test_throws ErrorException LocalSgd(acc, model, 3) do l
            kept = l
            error("inside")
        end
        @test !isopen(kept)
        e = error_of(() -> LocalSgd(acc, model, 2; no_such_option = 1))
        @test e.status == Accel.ERR_INVALID_ARGUMENT
        train_step!(acc, model, opt, x, y)   # gradients synchronise again after all of it
        foreach(close, (opt, model))
    end
end
