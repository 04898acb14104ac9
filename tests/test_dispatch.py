import pytest

from qbench.dispatch import LABELS, classify_dispatch, is_float_gemm, is_quantized_gemm

CUBLAS_BF16 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
NVJET = "nvjet_hsh_64x8_64x16_2x1_v_bz_splitK_TNT"
TINYGEMM = "void at::native::(anonymous namespace)::_weight_int4pack_mm_kernel<1, 2, 64, 1>(unsigned int const*, ...)"
CUTLASS_WMMA = "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x1_tn_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x1_tn_align8::Params)"
ELEMENTWISE = "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, ...)>(int, ...)"
FP8_CAST = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(c10::Float8_e4m3fn)#1}, std::array<char*, 2ul> >(int, ...)"
CUTLASS_I8 = "void cutlass::Kernel2<cutlass_80_tensorop_i16832gemm_s8_256x128_64x3_tn_align16>(Params)"
#: seen on the H200 (w8a8-dynamic at M = 512): six digits, missed by a {4,5} pattern before
CUTLASS_I8_6 = "void cutlass::Kernel2<cutlass_80_wmma_tensorop_i161616gemm_s8_32x32_128x1_tn_align16>(Params)"
CUBLAS_FP8 = "sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_cublas"
MEMCPY = "Memcpy DtoH (Device -> Pageable)"
MSLK_INT4 = ("_ZN12cutlass_mslk13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiEEENS1_10collective"
             "13CollectiveMmaINS1_49MainloopSm90TmaGmmaRmemAWarpSpecializedMixedInputILi4EEENS_15integer_subbyteILi4ELb1EEE")

CASES = [
    # (kernels, family, label)
    ([CUBLAS_BF16], "float", "float-gemm"),
    ([NVJET], "float", "float-gemm"),
    ([CUTLASS_WMMA, ELEMENTWISE], "float", "float-gemm"),
    ([NVJET, "void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>(...)"], "float", "float-gemm"),
    (["triton_tem_fused_mm_0"], "float", "float-gemm"),
    ([TINYGEMM], "weight-only", "fused-quantized"),
    (["triton_poi_fused__to_copy_mul_0", "triton_tem_fused_mm_1"], "weight-only", "fused-quantized"),
    (["triton_red_fused_mm_0"], "weight-only", "fused-quantized"),
    (["triton_red_fused__to_copy_mul_sum_0"], "weight-only", "fused-quantized"),
    ([ELEMENTWISE, CUBLAS_BF16], "weight-only", "dequantize+gemm"),
    ([FP8_CAST, NVJET], "weight-only", "dequantize+gemm"),
    ([CUBLAS_BF16], "weight-only", "float-gemm"),
    (["triton_red_fused_abs_amax_0", "triton_poi_fused_div_round_1", CUTLASS_I8], "dynamic", "fused-quantized"),
    ([FP8_CAST, CUBLAS_FP8], "dynamic", "fused-quantized"),
    (["void at::native::_scaled_mm_kernel"], "dynamic", "fused-quantized"),
    (["kgemm_4bit_inference_naive<__nv_bfloat16, 128, 16>"], "bnb", "fused-quantized"),
    ([CUTLASS_I8_6], "dynamic", "fused-quantized"),
    # seen on the H200 (bitsandbytes 0.50.2, nf4 at M = 1): labelled float-gemm before the fix
    (["void gemm_4bit_simt<__nv_bfloat16, 1>(__nv_bfloat16 const*, unsigned char const*)"], "bnb", "fused-quantized"),
    (["kDequantizeBlockwise<__nv_bfloat16, 512, 64, 8, 2>", CUBLAS_BF16], "bnb", "dequantize+gemm"),
    (["kInt8VectorQuant<__half, 1024, 0>", "sm80_xmma_gemm_i8i8_i32i32_i32_tn_n_tilesize"], "bnb", "fused-quantized"),
    ([ELEMENTWISE], "weight-only", "unknown"),
    ([MEMCPY], "float", "unknown"),
    ([], "bnb", "unknown"),
    ([MEMCPY, CUBLAS_BF16], "float", "float-gemm"),
    # gemlite's Triton kernels (gemlite 0.6 triton_kernels/*: the function names Triton launches)
    (["gemv_INT_revsplitK_kernel"], "weight-only", "fused-quantized"),
    (["gemm_splitK_INT_kernel"], "weight-only", "fused-quantized"),
    (["gemm_INT_kernel"], "weight-only", "fused-quantized"),
    (["scale_activations_per_token_triton_v4_kernel", "gemv_INT_splitK_kernel"], "dynamic", "fused-quantized"),
    # mslk's CUTLASS int4 GEMM: CUTLASS's int4b_t is integer_subbyte<4, true> in the mangled name
    ([MSLK_INT4], "weight-only", "fused-quantized"),
]


@pytest.mark.parametrize("names,family,label", CASES)
def test_classify(names, family, label):
    assert classify_dispatch(names, family) == label
    assert label in LABELS


def test_unknown_family():
    with pytest.raises(ValueError, match="'int4'"):
        classify_dispatch([CUBLAS_BF16], "int4")


def test_cast_to_fp8_is_not_a_gemm():
    assert not is_quantized_gemm(FP8_CAST) and not is_float_gemm(FP8_CAST)
    assert is_float_gemm(CUTLASS_WMMA) and not is_quantized_gemm(CUTLASS_WMMA)


def test_float_kernels_are_not_read_as_gemlite():
    assert not is_quantized_gemm("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>")
    assert is_float_gemm("void gemmSN_NN_kernel<float, 256, 4, 2, 8, 3, 4, false>")
