"""qbench.render.kernels: the readable kernel names tables show (the JSON keeps the full names)."""

from qbench.render.kernels import short_kernel


def test_short_kernel_reads_a_mangled_cutlass_name():
    # the mslk rowwise FP8 GEMM as the profiler names it on the H200 (results/h200/decode.json, cut)
    name = ("_ZN12cutlass_mslk13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiEEENS1_"
            "10collective13CollectiveMmaINS1_34MainloopSm90TmaGmmaWarpSpecializedILi22E")
    assert short_kernel(name) == "cutlass_mslk::device_kernel<gemm::kernel::GemmUniversal>"
    assert short_kernel("_kernel_quantize_fp8_row") == "_kernel_quantize_fp8_row"
