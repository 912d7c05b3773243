# Tensors: the layout rule (Julia's dimensions reversed), element types, errors.
# Included by runtests.jl inside its top test set.

@testset "layout rule: Julia's dimensions reversed" begin
    A = reshape(Float32.(1:24), 2, 3, 4)
    t = Tensor(A)
    @test shape(t) == [4, 3, 2]
    @test size(t) == (2, 3, 4) && ndims(t) == 3 && length(t) == 24
    @test Array(t) == A
    # Row-major bytes of the library's [4, 3, 2] are Julia's column-major memory as it is.
    @test reinterpret(Float32, rawdata(t)) == vec(A)
    close(t)
    # A linear layer on a (features, batch) array: the library computes x W' + b on [batch,
    # features]; in Julia that is W' x .+ b with W of Julia size (in, out).
    m = Model()
    add_layer!(m, "fc", :linear; in_features = 3, out_features = 2)
    define!(m, "def forward(self, x):\n    return self.fc.forward(x)\n")
    x = rand(Float32, 3, 5)
    W, b = Array(m["fc.weight"]), Array(m["fc.bias"])
    @test size(W) == (3, 2)
    y = m(x)
    @test size(y) == (2, 5)
    @test Array(y) ≈ transpose(W) * x .+ b
    close(m)
    # Images of Julia size (28, 28, N) are the library's [N, 28, 28]: a batch of B is (28, 28, B).
    images = rand(UInt8, 28, 28, 10)
    labels = collect(UInt8, 0:9)
    Accelerator() do acc
        loader = DataLoader(acc, Dataset(images, labels); batch_size = 4)
        batches = [(Array(x), Array(y)) for (x, y) in loader]
        @test length(batches) == 3
        @test batches[1][1] == images[:, :, 1:4] && batches[1][2] == labels[1:4]
        @test size(batches[3][1]) == (28, 28, 2)
        idx = idx_dataset("$FASHION_MNIST/t10k-images-idx3-ubyte.gz", "$FASHION_MNIST/t10k-labels-idx1-ubyte.gz")
        @test length(idx) == 10000 && field_count(idx) == 2
        for (x, y) in DataLoader(acc, idx; batch_size = 8)
            @test size(x) == (28, 28, 8) && shape(x) == [8, 28, 28] && eltype(x) == UInt8
            @test size(y) == (8,)
            break
        end
    end
end

@testset "tensors" begin
    for T in (Float32, Float64, Float16, Int64, Int32, Int16, Int8, UInt8, Bool)
        A = T == Bool ? rand(Bool, 3, 2) : T.(reshape(0:5, 3, 2))
        Tensor(A) do t
            @test eltype(t) == T && Array(t) == A && Array{T}(t) == A
            @test Accel.datasize(t) == 6 * sizeof(T) == 6 * Accel.dtype_size(dtype(t))
        end
    end
    s = Tensor(2.5)
    @test shape(s) == Int64[] && size(s) == () && only(s) == 2.5 && s[] == 2.5 && Array(s)[] == 2.5
    @test only(Tensor(Int32(7))) === 7 && only(Tensor(true)) === true
    @test Array{Float64}(Tensor(Int32[1, 2])) == [1.0, 2.0]
    bf = Tensor(Accel.BF16, UInt8[0x80, 0x3f, 0x00, 0x40], (2,))   # 1.0 and 2.0
    @test dtype(bf) == Accel.BF16 && rawdata(bf) == UInt8[0x80, 0x3f, 0x00, 0x40]
    @test only(Tensor(Accel.BF16, UInt8[0x80, 0x3f], ())) === 1.0
    @test error_of(() -> Array(bf)).status == Accel.ERR_DTYPE
    e = error_of(() -> Tensor(Accel.F32, UInt8[1, 2, 3], (1,)))
    @test e.status == Accel.ERR_INVALID_ARGUMENT && occursin("need 4 bytes", e.message)
    @test error_of(() -> Tensor([1 + 2im])).status == Accel.ERR_DTYPE
    e = error_of(() -> only(Tensor(Float32[1, 2])))
    @test e.status == Accel.ERR_SHAPE && !isempty(e.message)
    # item(Int64, t) is deprecated (idioms.jl): it still refuses a floating tensor, and warns.
    @test (@test_deprecated error_of(() -> Accel.item(Int64, Tensor(1.5)))).status == Accel.ERR_DTYPE
    p = Accel.borrow_torch(s)
    @test p != C_NULL
    w = Accel.wrap_torch(p)
    @test w[] == 2.5
    close(w)
    close(s)
    close(s)   # idempotent
    @test !isopen(s)
    e = error_of(() -> only(s))
    @test e.status == Accel.ERR_STATE && occursin("used after close", e.message)
    @test occursin("closed", sprint(show, s))
end
