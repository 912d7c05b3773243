# Big-model inference: infer_device_map and dispatch! with disk offload, against the model fully
# loaded. Included by runtests.jl inside its top test set, after pretrained.jl (write_safetensors).

# `layers` Linear(width, width) layers l0.., called in a chain by forward.
function chain_model(layers, width; empty = false)
    m = empty ? empty_model() : Model()
    body = "def forward(self, x):\n"
    for i in 0:layers-1
        add_layer!(m, "l$i", :linear; in_features = width, out_features = width)
        body *= "    x = self.l$i.forward(x)\n"
    end
    define!(m, body * "    return x\n")
    m
end

# Every tensor of `m` (all F32) as one safetensors file; a Julia array's dims are the library's
# reversed, so its column-major values are the library's row-major ones.
function write_model_checkpoint(path, m)
    write_safetensors(path, [begin
        A = Tensor(t -> Array(t), m[name])
        (name, "F32", reverse(size(A)), little_endian_bytes(vec(A)))
    end for name in tensor_names(m)])
end

@testset "infer_device_map, dispatch!" begin
    full = chain_model(8, 64)
    path = write_model_checkpoint(joinpath(mktempdir(), "model.safetensors"), full)
    x = Float32[0.05f0 * ((i * 37) % 101) - 1 for i in 0:64*3-1]
    x = reshape(x, 64, 3)   # the library's [3, 64]
    expected = full(y -> Array(y), x)

    m = chain_model(8, 64; empty = true)
    # 8 layers of 16640 bytes: 50000, less room kept for the largest layer, holds l0 and l1.
    options = "max_memory=cpu:50000,disk"
    map = infer_device_map(m, options)
    @test map isa Vector{String}
    @test length(map) == 8 && map[1:2] == ["l0=cpu", "l1=cpu"] && "l7=disk" in map
    @test dispatch!(m, path, join(map, "\n")) === m
    @test m(y -> Array(y), x) == expected
    @test m(y -> Array(y), x) == expected   # the offloaded weights are read again
    e = error_of(() -> m["l7.weight"])
    @test e !== nothing && e.status == Accel.ERR_STATE && occursin("offloaded to disk", e.message)
    @test error_of(() -> dispatch!(m, path, options)).status == Accel.ERR_STATE

    # No disk and too little cpu: out of memory, naming the budget.
    e = error_of(() -> infer_device_map(chain_model(8, 64; empty = true), "max_memory=cpu:50000"))
    @test e !== nothing && e.status == Accel.ERR_OUT_OF_MEMORY &&
          occursin("cpu 50000 bytes and no disk", e.message)
    @test error_of(() -> infer_device_map(full, "max_memory=cpu:lots")).status ==
          Accel.ERR_INVALID_ARGUMENT
end
