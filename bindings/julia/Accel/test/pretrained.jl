# Pretrained checkpoints loaded as transformers does (load_pretrained!), from a safetensors file
# written here byte by byte. Included by runtests.jl inside its top test set.

# A safetensors file: the header's length (8 bytes, little-endian), the JSON header, the data.
# `tensors` are (name, dtype, shape, bytes) in file order.
function write_safetensors(path, tensors)
    entries = String[]
    data = UInt8[]
    for (name, dtype, shape, bytes) in tensors
        offsets = (length(data), length(data) + length(bytes))
        push!(entries, "\"$name\":{\"dtype\":\"$dtype\",\"shape\":[$(join(shape, ","))]," *
                       "\"data_offsets\":[$(offsets[1]),$(offsets[2])]}")
        append!(data, bytes)
    end
    header = Vector{UInt8}("{" * join(entries, ",") * "}")
    open(path, "w") do io
        write(io, htol(UInt64(length(header))))
        write(io, header)
        write(io, data)
    end
    path
end

little_endian_bytes(values) = collect(reinterpret(UInt8, htol.(values)))

# bert.encoder.weight (2x2 zeros) and classifier.weight (1x2 nines): the program's own tensors.
function bert_classifier()
    m = Model()
    for (name, A) in (("bert.encoder.weight", zeros(Float32, 2, 2)),
                      ("classifier.weight", fill(9.0f0, 2, 1)))   # the library's [1, 2]
        Tensor(A) do t
            set_requires_grad!(t)
            add_parameter!(m, name, t)
        end
    end
    m
end

# Row-major values of a model's tensor.
values_of(m, name) = Tensor(t -> vec(Array(t)), m[name])   # the copy is closed

@testset "load_pretrained!" begin
    dir = mktempdir()
    fp16_1234 = UInt16[0x3C00, 0x4000, 0x4200, 0x4400]   # 1, 2, 3, 4 in IEEE half precision
    path = write_safetensors(joinpath(dir, "model.safetensors"), [
        ("encoder.weight", "F16", (2, 2), little_endian_bytes(fp16_1234)),
        ("pooler.weight", "F32", (2,), little_endian_bytes(Float32[5, 6])),
        ("embeddings.position_ids", "I64", (3,), little_endian_bytes(Int64[0, 1, 2])),
    ])

    m = bert_classifier()
    # strict: the missing classifier and the unexpected tensors are errors, and nothing changes.
    e = error_of(() -> load_pretrained!(m, path; strict = true, base_model_prefix = "bert"))
    @test e !== nothing && e.status == Accel.ERR_INVALID_ARGUMENT
    @test values_of(m, "bert.encoder.weight") == zeros(Float32, 4)
    @test values_of(m, "classifier.weight") == Float32[9, 9]

    report = load_pretrained!(m, path; base_model_prefix = "bert")
    @test report isa LoadReport
    @test values_of(m, "bert.encoder.weight") == Float32[1, 2, 3, 4]   # fp16 cast to fp32
    @test shape(m["bert.encoder.weight"]) == [2, 2]
    @test values_of(m, "classifier.weight") == Float32[9, 9]           # the new head keeps its own
    @test report.missing == ["classifier.weight"]
    @test report.unexpected == ["embeddings.position_ids", "pooler.weight"]
    @test report.mismatched == String[]
    @test occursin("Some weights of", report.warnings)
    @test startswith(report.warnings, "WARNING: ")
    # The unexpected tensors are INFO unless the checkpoint was made for this architecture.
    @test occursin("INFO: Some weights of the model checkpoint", report.text)
    @test !occursin("INFO: ", report.warnings)
    r1 = load_pretrained!(m, path; base_model_prefix = "bert", model_name = "BertForSeq",
                          architecture_matches = true)
    @test occursin("WARNING: Some weights of the model checkpoint at $path were not used " *
                   "when initializing BertForSeq", r1.warnings)
    @test r1.text == r1.warnings

    # The string form, as the library writes the options.
    r2 = load_pretrained!(m, path, "strict=false base_model_prefix=bert")
    @test r2.missing == report.missing && r2.unexpected == report.unexpected
    e = error_of(() -> load_pretrained!(m, path, "colour=red"))
    @test e !== nothing && e.status == Accel.ERR_INVALID_ARGUMENT
    # A value the library would split is refused before the call.
    @test_throws ArgumentError load_pretrained!(m, path; model_name = "my model")
    # Without the prefix nothing matches: everything is missing or unexpected.
    bare = bert_classifier()
    r3 = load_pretrained!(bare, path)
    @test r3.missing == ["bert.encoder.weight", "classifier.weight"]
    close(bare)
    # A tensor of another shape: ERR_SHAPE, or kept and reported with ignore_mismatched_sizes.
    other = Model()
    Tensor(zeros(Float32, 4)) do t
        set_requires_grad!(t)
        add_parameter!(other, "encoder.weight", t)
    end
    e = error_of(() -> load_pretrained!(other, path))
    @test e !== nothing && e.status == Accel.ERR_SHAPE
    r4 = load_pretrained!(other, path; ignore_mismatched_sizes = true)
    @test r4.mismatched == ["encoder.weight"] && r4.missing == String[]
    @test values_of(other, "encoder.weight") == zeros(Float32, 4)
    close(other)

    e = error_of(() -> load_pretrained!(m, joinpath(dir, "none.safetensors")))
    @test e !== nothing && e.status == Accel.ERR_IO
    @test values_of(m, "bert.encoder.weight") == Float32[1, 2, 3, 4]
    close(m)
end

@testset "empty_model: built without weights, filled by a load" begin
    dir = mktempdir()
    # fc.weight F32 2x2 = 1,2,3,4 (row-major) and fc.bias F32 [2] = 5,6: a linear layer 2 -> 2.
    path = write_safetensors(joinpath(dir, "model.safetensors"),
                             [("fc.weight", "F32", [2, 2], little_endian_bytes(Float32[1, 2, 3, 4])),
                              ("fc.bias", "F32", [2], little_endian_bytes(Float32[5, 6]))])
    m = empty_model()
    add_layer!(m, "fc", :linear; in_features = 2, out_features = 2)
    @test parameter_count(m) == 6
    e = error_of(() -> m["fc.weight"])
    @test e !== nothing && e.status == Accel.ERR_STATE && occursin("still empty", e.message)
    load_checkpoint_in_model(m, path)
    @test values_of(m, "fc.weight") == Float32[1, 2, 3, 4]
    @test values_of(m, "fc.bias") == Float32[5, 6]
    close(m)
end

@testset "load_pretrained! with a name map" begin
    dir = mktempdir()
    fp16_1234 = UInt16[0x3C00, 0x4000, 0x4200, 0x4400]   # 1, 2, 3, 4 in IEEE half precision
    # Another framework's names: layers.N for layer.N, LayerNorm gamma for weight, and a head.
    path = write_safetensors(joinpath(dir, "model.safetensors"), [
        ("encoder.layers.0.dense.weight", "F16", (2, 2), little_endian_bytes(fp16_1234)),
        ("lm_head.weight", "F32", (2,), little_endian_bytes(Float32[5, 6])),
    ])
    m = Model()
    for (name, A) in (("bert.encoder.layer.0.dense.weight", zeros(Float32, 2, 2)),
                      ("classifier.weight", fill(9.0f0, 2, 1)))
        Tensor(A) do t
            set_requires_grad!(t)
            add_parameter!(m, name, t)
        end
    end
    unchanged() = values_of(m, "bert.encoder.layer.0.dense.weight") == zeros(Float32, 4)

    # Failures first, each leaving the model as it was.
    e = error_of(() -> load_pretrained!(_ -> "same", m, path))
    @test e !== nothing && e.status == Accel.ERR_INVALID_ARGUMENT && occursin("one name, 'same'", e.message)
    @test unchanged()
    e = error_of(() -> load_pretrained!(_ -> "n"^5000, m, path))
    @test e !== nothing && e.status == Accel.ERR_CALLBACK && occursin("longer than 4095 bytes", e.message)
    @test unchanged()
    @test_throws ArgumentError load_pretrained!(_ -> "", m, path)
    @test_throws ArgumentError load_pretrained!(_ -> 42, m, path)
    thrown = try
        load_pretrained!(m, path) do name
            name == "lm_head.weight" && throw(KeyError(name))
            name
        end
        nothing
    catch exception
        exception
    end
    @test thrown == KeyError("lm_head.weight")   # the map's own exception, rethrown
    @test unchanged()

    asked = String[]
    report = load_pretrained!(m, path; base_model_prefix = "bert") do name
        push!(asked, name)
        startswith(name, "lm_head.") ? nothing : replace(name, "layers." => "layer.")
    end
    @test asked == ["encoder.layers.0.dense.weight", "lm_head.weight"]
    @test values_of(m, "bert.encoder.layer.0.dense.weight") == Float32[1, 2, 3, 4]
    @test report.unexpected == ["lm_head.weight"]
    @test report.missing == ["classifier.weight"]
    close(m)
end
