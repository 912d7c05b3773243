# Issue 53's Julia idioms: exports that live beside Flux and MLUtils, only/x[] for scalars (item
# deprecated), Flux-style Chain building, and set_interrupted!. Included by runtests.jl inside its
# top test set (after trainer.jl, whose helpers it uses).

@testset "exports beside Flux, MLUtils and Base" begin
    exported = names(Accel)
    # Names Flux (with NNlib), MLUtils or Base export too, or that the issue found too generic.
    for n in (:DataLoader, :Model, :Optimizer, :Scheduler, :call, :item, :device, :shape, :gather,
              :trainmode!, :testmode!, :Chain, :Dense, :Conv, :BatchNorm, :LayerNorm, :Embedding,
              :Dropout, :MaxPool, :flatten)
        @test !(n in exported)
        @test isdefined(Accel, n)   # qualified, Accel.DataLoader, or `using Accel: DataLoader`
    end
    @test all(n -> !isdefined(Base, n), filter(n -> n != :Accel, exported))
    @test :set_interrupted! in exported && :Accelerator in exported
    # The export lists of Flux 0.13/0.14 (src/Flux.jl, Optimise, Train), NNlib's names Flux
    # re-exports that read like Accel's, MLUtils 0.4 and Optimisers, copied here since none is
    # installed: a name Accel exports later that one of them has fails here.
    others = (:Chain, :Dense, :Embedding, :Maxout, :SkipConnection, :Parallel, :PairwiseFusion,
              :RNN, :LSTM, :GRU, :GRUv3, :SamePad, :Conv, :CrossCor, :ConvTranspose,
              :DepthwiseConv, :AdaptiveMaxPool, :AdaptiveMeanPool, :GlobalMaxPool, :GlobalMeanPool,
              :MaxPool, :MeanPool, :Dropout, :AlphaDropout, :LayerNorm, :BatchNorm, :InstanceNorm,
              :GroupNorm, :Upsample, :PixelShuffle, :fmap, :cpu, :gpu, :f16, :f32, :f64,
              :testmode!, :trainmode!, :gradient, :withgradient, :params, :train!, :update!,
              :setup, :Descent, :Adam, :AdamW, :Momentum, :Nesterov, :RMSProp, :AdaGrad,
              :AdaMax, :AdaDelta, :AMSGrad, :NAdam, :OAdam, :RAdam, :AdaBelief, :InvDecay,
              :ExpDecay, :WeightDecay, :ClipValue, :ClipNorm, :onehot, :onecold, :onehotbatch,
              :OneHotArray, :gather, :scatter, :softmax, :logsoftmax, :relu, :sigmoid, :σ,
              :gelu, :elu, :conv, :maxpool, :meanpool, :dropout, :batched_mul, :pad_zeros,
              :pad_constant, :upsample_nearest, :numobs, :getobs, :getobs!, :mapobs, :filterobs,
              :groupobs, :joinobs, :shuffleobs, :batchsize, :batchview, :BatchView, :eachobs,
              :DataLoader, :kfolds, :leavepout, :obsview, :ObsView, :randobs, :oversample,
              :undersample, :splitobs, :batch, :batchseq, :chunk, :flatten, :group_counts,
              :group_indices, :normalise, :stack, :unbatch, :unsqueeze, :unstack, :Datasets,
              :destructure, :adjust!, :adjust, :freeze!, :thaw!, :trainable, :update,
              :OptimiserChain, :ClipGrad)
    @test isempty(intersect(exported, others))
end

@testset "deprecated spellings warn and still work" begin
    t = Tensor(2.5)
    @test (@test_deprecated r"use `only\(t\)` or `t\[\]`" Accel.item(t)) == 2.5
    @test (@test_deprecated r"Float64\(only\(t\)\)" Accel.item(Float64, t)) == 2.5
    @test (@test_deprecated Accel.item(Tensor(Int32(3)))) === 3
    @test (@test_deprecated Accel.item(Tensor(true))) === 1   # item's Int64, where only gives true
    close(t)
end

relu(x) = max(x, zero(x))   # NNlib's relu, matched by name as Flux's own would be

const CHAIN_LOSS = """
def training_step(self, x, y):
    return torch.cross_entropy_loss(self.forward(x), y)
"""

@testset "Flux-style Chain over the layer catalogue" begin
    Accelerator() do acc
        set_seed(acc, 11)
        chain = Accel.Model(Accel.Chain(Accel.Dense(6 => 16, relu), Accel.Dropout(0.0),
                                        Accel.Dense(16 => 3)); methods = CHAIN_LOSS)
        set_seed(acc, 11)
        byhand = Model()
        add_layer!(byhand, "layer1", :linear; in_features = 6, out_features = 16)
        add_layer!(byhand, "layer3", :linear; in_features = 16, out_features = 3)
        define!(byhand, """
        def forward(self, x):
            return self.layer3.forward(torch.relu(self.layer1.forward(x)))
        """ * CHAIN_LOSS)
        @test tensor_names(chain) == tensor_names(byhand) ==
              ["layer1.weight", "layer1.bias", "layer3.weight", "layer3.bias"]
        y = Int64[j % 3 for j in 1:32]   # classes that features 1-3 tell, with noise besides
        x = Float32[(i % 3 == y[j]) + sin(i * j) / 4 for i in 1:6, j in 1:32]
        losses = Dict{Symbol,Vector{Float64}}()
        for (name, m) in (:chain => chain, :byhand => byhand)
            opt = Optimizer(m, :sgd; lr = 0.5)
            losses[name] = [m(:training_step, x, y) do loss
                                backward(acc, loss)
                                step!(opt)
                                zero_grad!(opt)
                                loss[]
                            end for _ in 1:30]
            close(opt)
        end
        @test losses[:chain] == losses[:byhand]            # bitwise the model written by hand
        @test losses[:chain][end] < losses[:chain][1] / 2  # and it learns
        @test Array(chain["layer3.weight"]) == Array(byhand["layer3.weight"])

        # Named layers, convolutions, pooling, flatten, normalisation.
        cnn = Accel.Model(Accel.Chain(conv = Accel.Conv((3, 3), 1 => 4, relu; pad = 1),
                                      norm = Accel.BatchNorm(4), pool = Accel.MaxPool((2, 2)),
                                      flat = Accel.flatten, fc = Accel.Dense(4 * 4 * 4 => 2)))
        @test tensor_names(cnn)[1:2] == ["conv.weight", "conv.bias"]
        @test size(cnn(rand(Float32, 8, 8, 1, 5))) == (2, 5)
        foreach(close, (chain, byhand, cnn))

        # What the catalogue cannot build is refused, naming why, and leaves no model behind.
        @test occursin("square kernels", error_of(() -> Accel.Conv((3, 5), 1 => 2)).message)
        @test occursin("softplus", error_of(() -> Accel.Model(Accel.Chain(Accel.Dense(2 => 2, :softplus)))).message)
        @test error_of(() -> Accel.Model(Accel.Chain(Accel.Dense(0 => 2)))).status == Accel.ERR_INVALID_ARGUMENT
    end
end

@testset "set_interrupted! stops the Trainer before its next step" begin
    with_trainer_run() do acc, model, opt, sched, train, eval
        Trainer(acc, model, opt, train; scheduler = sched, eval = eval,
                trainer_settings(num_train_epochs = 1)...) do trainer
            set_interrupted!(acc, true)
            e = error_of(() -> fit!(trainer))
            @test e.status == Accel.ERR_CANCELLED && occursin("interrupted", e.message)
            @test global_step(trainer) == 0
            set_interrupted!(acc, false)
            fit!(trainer)
            @test global_step(trainer) == 3
        end
    end
end
