# clip_grad_value! and clip_grad_norm! on gradients read back through TorchScript.
# Included by runtests.jl inside its top test set.

@testset "clip_grad_value! clamps every gradient" begin
    Accelerator() do acc
        m = Model()
        add_layer!(m, "fc", :linear; in_features = 3, out_features = 2)
        define!(m, """
        def training_step(self, x):
            return (self.fc.forward(x) * 10.0).sum()

        def weight_grad(self):
            g = self.fc.weight.grad
            assert g is not None
            return g
        """)
        # d loss / d weight[o, i] = 10 * the sum of input i over the batch: -10, 6, -29.9 for
        # both outputs (Julia's 3 x 2, the reverse of torch's 2 x 3).
        x = Float32[1 -2; 0.5 0.1; -3 0.01]
        m(l -> backward(acc, l), :training_step, x)
        grads() = m(g -> Array(g), :weight_grad)
        @test grads() ≈ Float32[-10 -10; 6 6; -29.9 -29.9]
        clip_grad_value!(acc, m, 8)
        @test grads() == Float32[-8 -8; 6 6; -8 -8]   # inside [-8, 8] untouched, the rest at ±8
        # clip_grad_norm! returns the norm before (the bias's gradient, 10 x 2 samples = 20 for
        # each output, was clamped to 8 as well) and scales every gradient to max_norm.
        norm = sqrt(2 * (64 + 36 + 64) + 2 * 64)
        @test clip_grad_norm!(acc, m, 1e9) ≈ norm
        clip_grad_norm!(acc, m, 1)
        @test grads() ≈ Float32[-8 -8; 6 6; -8 -8] ./ norm
        close(m)
    end
end
