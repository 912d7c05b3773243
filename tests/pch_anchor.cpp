// The one source of accel_test_torch_pch (tests/CMakeLists.txt): a target must compile something to
// make the precompiled LibTorch headers the tests reuse.
